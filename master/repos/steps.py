"""The ``steps`` table: one row per (episode, attempt, index), the step as JSON in ``body``
(the :class:`coda.contracts.records.Step` contract, ``created_at`` aside)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from coda.contracts.records import Step, StepLabel
from master.db.pg import Conn, dumps


def _body(step: Step) -> dict[str, Any]:
    """The step as its row's ``body`` keeps it (``created_at`` is the row's own)."""
    return step.model_dump(mode="json", exclude={"created_at"})


# Step reports (one, or a worker's batch) in one statement; the numbers (1-based, in the order
# sent) of the reports the leases allowed come back. The lease decides the attempt: the stored
# step carries the job's attempt, and a report that names another one matches no row. Every
# row the ``ok`` CTE finds is stored: a data-modifying CTE runs to completion.
_FOR_LEASE = (
    "with r as (select * from unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::int[]) "
    "with ordinality as r(job_id, token, idx, body, attempt, n)), "
    "ok as (select r.n, e.id as episode_id, j.attempts, r.idx, r.body from r "
    "join jobs j on j.id = r.job_id and j.lease_token = r.token and j.status = 'leased' "
    "and (r.attempt is null or r.attempt = j.attempts) "
    "join episodes e on e.job_id = j.id), "
    "ins as (insert into steps (episode_id, attempt, idx, body) "
    "select episode_id, attempts, idx, jsonb_set(body::jsonb, '{attempt}', to_jsonb(attempts)) "
    "from ok on conflict (episode_id, attempt, idx) do update set body = excluded.body) "
    "select n from ok"
)


async def insert_for_lease(conn: Conn, reports: list[tuple[uuid.UUID, str, Step]]) -> set[int]:
    """Store each ``(job_id, token, step)`` as a step of the episode the job held with
    ``token`` runs (idempotent per attempt and index), in one statement; the positions
    (0-based) of those the leases allowed. Two reports of one job and index must not both be
    sent (the caller keeps the last)."""
    if not reports:
        return set()
    rows = await conn.fetch(
        _FOR_LEASE, [j for j, _, _ in reports], [t for _, t, _ in reports],
        [s.index for _, _, s in reports],
        [dumps(_body(s)) for _, _, s in reports],
        [s.attempt for _, _, s in reports])
    return {int(r["n"]) - 1 for r in rows}


async def of_episode(conn: Conn, episode_id: uuid.UUID) -> list[Step]:
    """Every step of every attempt, in order."""
    rows = await conn.fetch("select body, created_at from steps where episode_id = $1 "
                            "order by attempt, idx", episode_id)
    return [Step.model_validate({**r["body"], "created_at": r["created_at"]}) for r in rows]


_LAST_ATTEMPT = ("select attempt, idx, body from steps where episode_id = $1 and attempt = "
                 "(select max(attempt) from steps where episode_id = $1) order by idx")


async def of_last_attempt(conn: Conn, episode_id: uuid.UUID) -> list[asyncpg.Record]:
    """attempt, idx, body of the steps of the episode's last attempt, in order."""
    return list(await conn.fetch(_LAST_ATTEMPT, episode_id))


async def steps_of_last_attempt(conn: Conn, episode_id: uuid.UUID) -> list[Step]:
    """The steps of the episode's last attempt, in order."""
    return [Step.model_validate(r["body"]) for r in await of_last_attempt(conn, episode_id)]


async def label(conn: Conn, episode_id: uuid.UUID, attempt: int, positive: list[int]) -> None:
    """Set every step of the attempt ``positive`` (indexes listed) or ``negative``."""
    await conn.execute(
        "update steps set body = jsonb_set(body, '{label}', to_jsonb(case when idx = "
        "any($3::int[]) then $4::text else $5::text end)) where episode_id = $1 and attempt = $2",
        episode_id, attempt, positive, StepLabel.POSITIVE.value, StepLabel.NEGATIVE.value)
