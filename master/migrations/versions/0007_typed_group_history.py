"""typed group history: a stored group's ``state.history`` holds the planner request's own
history steps (``coda.contracts.history.HistoryStep``), so a past step's screenshot is an
image reference ``{"ref": <artifact key>}`` instead of the bare key the worker used to write
(``{thought, action_text, screenshot: <key>}``). One shape for a past step, in the planner's
requests and in the groups the trainer reads.

A group whose stored state cannot be read back under the contracts' bounds (a step index
outside 0..100000, the bound every reader holds; a history step without a text thought or
with a screenshot that is not an artifact key) was taken by an earlier master that did not
check them: no trainer could lease it. Those still ready or leased are dropped with the reason
``unfit`` (kept, so the counts show them). Other stored numbers were written by workers, well
inside their bounds.

The downgrade puts the bare keys back (an inline ``b64`` screenshot, which only the new
contract admits, becomes null); dropped groups stay dropped.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_HISTORY = "body -> 'state' -> 'history'"
_HAS_HISTORY = f"where jsonb_typeof({_HISTORY}) = 'array' and jsonb_array_length({_HISTORY}) > 0"


def _rewrite(screenshot: str) -> str:
    """Every history item rebuilt with ``screenshot`` (an SQL expression of ``h``)."""
    return (f"update groups set body = jsonb_set(body, '{{state,history}}', (select "
            "jsonb_agg(jsonb_build_object('thought', h -> 'thought', 'action_text', "
            f"h -> 'action_text', 'screenshot', {screenshot}) order by n) from "
            f"jsonb_array_elements({_HISTORY}) with ordinality as t(h, n))) {_HAS_HISTORY}")


_UP = _rewrite("case when jsonb_typeof(h -> 'screenshot') = 'string' then "
               "jsonb_build_object('ref', h -> 'screenshot') end")
_DOWN = _rewrite("h -> 'screenshot' -> 'ref'")

_KEY = r"^sha256/[0-9a-f]{2}/[0-9a-f]{64}\.(png|jpg|webp)$"
_STEP_INDEX = ("case when jsonb_typeof(body -> 'state' -> 'step_index') = 'number' then "
               "(body -> 'state' ->> 'step_index')::numeric end")
_UNFIT = (
    "update groups set status = 'dropped', reason = 'unfit', lease_token = null "
    "where status in ('ready', 'leased') and (not coalesce((select x between 0 and 100000 "
    f"and x = trunc(x) from (select {_STEP_INDEX} as x) v), false) "
    f"or exists (select 1 from jsonb_array_elements(case when jsonb_typeof({_HISTORY}) = "
    f"'array' then {_HISTORY} else '[]'::jsonb end) h where "
    "jsonb_typeof(h -> 'thought') is distinct from 'string' "
    f"or (h -> 'screenshot' ->> 'ref') !~ '{_KEY}'))"
)


def upgrade() -> None:
    op.execute(_UP)
    op.execute(_UNFIT)


def downgrade() -> None:
    op.execute(_DOWN)
