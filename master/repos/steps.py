"""The ``steps`` table: one row per (episode, attempt, index), the step as JSON in ``body``
(the :class:`coda.contracts.records.Step` contract, ``created_at`` aside)."""

from __future__ import annotations

import uuid

import asyncpg

from coda.contracts.records import Step, StepLabel
from master.db.pg import Conn

# The lease decides the attempt: the stored step carries the job's attempt, and a report that
# names another one matches no row.
_FOR_LEASE = (
    "insert into steps (episode_id, attempt, idx, body) "
    "select e.id, j.attempts, $3::int, jsonb_set($4::jsonb, '{attempt}', to_jsonb(j.attempts)) "
    "from jobs j join episodes e on e.job_id = j.id "
    "where j.id = $1 and j.lease_token = $2 and j.status = 'leased' "
    "and ($5::int is null or $5::int = j.attempts) "
    "on conflict (episode_id, attempt, idx) do update set body = excluded.body "
    "returning episode_id"
)


async def insert_for_lease(conn: Conn, job_id: uuid.UUID, token: str, step: Step) -> bool:
    """Store the step of the episode the job held with ``token`` runs (idempotent per attempt
    and index); False when the lease does not allow it."""
    body = step.model_dump(mode="json", exclude={"created_at"})
    return await conn.fetchval(_FOR_LEASE, job_id, token, step.index, body,
                               step.attempt) is not None


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
