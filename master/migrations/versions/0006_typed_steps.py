"""typed step records: a step's screen size, parsed plan, timings and judge label move out of
the free ``body -> 'extra'`` dict into typed fields of the body (``screen``, ``plan``,
``timings``, ``label``), and ``extra`` goes.

The label stays a field of the body rather than a column: it is part of the ``Step`` contract
(a step read back carries it), nothing filters or indexes on it, and the one statement that
sets it (``master.repos.steps.label``) writes the body anyway; a column would be a second
place the same fact could disagree with.

Old rows kept ``extra.screen`` {width, height}, ``extra.plan`` {...}, ``extra.timings_ms``
{...} and ``extra.label``; any other key of ``extra`` had no typed place and is dropped (the
worker never wrote another). The worker recorded a screen size with every screenshot, so old
worker rows read back as valid steps. The downgrade puts them back into ``extra``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _present(pairs: str) -> str:
    """The object of ``pairs`` (jsonb_build_object arguments) without its null members (only
    the top level: a plan's own null fields stay)."""
    return ("(select coalesce(jsonb_object_agg(key, value), '{}'::jsonb) from jsonb_each("
            f"jsonb_build_object({pairs})) where jsonb_typeof(value) <> 'null')")


_UP = ("update steps set body = (body - 'extra') || " + _present(
    "'screen', body -> 'extra' -> 'screen', 'plan', body -> 'extra' -> 'plan', "
    "'timings', body -> 'extra' -> 'timings_ms', 'label', body -> 'extra' -> 'label'")
    + " where body ? 'extra'")

_DOWN = ("update steps set body = (body - 'screen' - 'plan' - 'timings' - 'label') || "
         "jsonb_build_object('extra', " + _present(
             "'screen', body -> 'screen', 'plan', body -> 'plan', "
             "'timings_ms', body -> 'timings', 'label', body -> 'label'") + ")")


def upgrade() -> None:
    op.execute(_UP)


def downgrade() -> None:
    op.execute(_DOWN)
