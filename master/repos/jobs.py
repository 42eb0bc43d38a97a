"""The ``jobs`` table (and the episode rows that mirror an episode job's state)."""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from coda.contracts.master_api import JobState
from coda.contracts.records import JobKind, JobStatus
from master.db.pg import Conn
from master.db.statuses import ACTIVE_JOBS
from master.errors import JobNotFound, LeaseLost


@dataclass(frozen=True)
class NewJob:
    id: uuid.UUID
    kind: JobKind
    payload: dict[str, Any]
    priority: int = 0
    max_attempts: int = 3
    batch_id: uuid.UUID | None = None


def new_token() -> str:
    return secrets.token_urlsafe(24)


_INSERT = ("insert into jobs (id, kind, status, priority, payload, attempts, max_attempts, "
           "batch_id) values ($1, $2, 'queued', $3, $4, 0, $5, $6)")


def _args(j: NewJob) -> tuple[Any, ...]:
    return (j.id, j.kind.value, j.priority, j.payload, j.max_attempts, j.batch_id)


async def insert(conn: Conn, jobs: list[NewJob]) -> None:
    if jobs:
        await conn.executemany(_INSERT, [_args(j) for j in jobs])


async def insert_once(conn: Conn, job: NewJob) -> bool:
    """Insert ``job`` unless a job with its id exists (a follow-up whose id derives from what
    it is about); whether it was inserted."""
    got = await conn.fetchval(_INSERT + " on conflict (id) do nothing returning id", *_args(job))
    return got is not None


async def queued_for_push(conn: asyncpg.Connection,
                          ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    """The still-queued ones of ``ids`` (id, kind, priority, seq), share-locked until the
    caller's transaction ends: a cancel waits until they are in Redis, then removes them."""
    return list(await conn.fetch(
        "select id, kind, priority, seq from jobs where id = any($1) and status = 'queued' "
        "order by id for share", ids))


# One statement: claim the popped jobs that are still queued and mirror it on their episodes.
# Job rows are locked in id order (as a cancel locks them): two statements that lock several
# jobs never wait for each other in a circle (PostgreSQL would break it by failing one).
_CLAIM = (
    "with locked as ("
    " select id from jobs where id = any($1::uuid[]) and status = 'queued'"
    " order by id for update), "
    "claimed as ("
    " update jobs set status = 'leased', lease_token = v.token, attempts = jobs.attempts + 1,"
    " worker_id = $3, lease_expires_at = $4, updated_at = now()"
    " from unnest($1::uuid[], $2::text[]) as v(id, token) join locked on locked.id = v.id"
    " where jobs.id = v.id and jobs.status = 'queued'"
    " returning jobs.id, jobs.kind, jobs.payload, jobs.attempts, jobs.max_attempts,"
    " jobs.lease_token), "
    "running as ("
    " update episodes set status = 'running', attempts = c.attempts, error = null,"
    " started_at = coalesce(episodes.started_at, now()), updated_at = now()"
    " from claimed c where c.id = episodes.job_id and c.kind = 'episode') "
    "select * from claimed"
)


async def claim(conn: Conn, ids: list[uuid.UUID], tokens: list[str], *,
                worker_id: uuid.UUID, expires: datetime) -> list[asyncpg.Record]:
    """Lease the ones of ``ids`` that are still queued, each with its token."""
    return list(await conn.fetch(_CLAIM, ids, tokens, worker_id, expires))


async def held(conn: Conn, leases: list[tuple[uuid.UUID, str]]) -> list[asyncpg.Record]:
    """The jobs of ``leases`` (id, token) still leased with their token, as a lease returns
    them (id, kind, payload, attempts, max_attempts, lease_token, lease_expires_at)."""
    return list(await conn.fetch(
        "select j.id, j.kind, j.payload, j.attempts, j.max_attempts, j.lease_token, "
        "j.lease_expires_at from jobs j join unnest($1::uuid[], $2::text[]) as v(id, token) "
        "on j.id = v.id and j.lease_token = v.token where j.status = 'leased'",
        [i for i, _ in leases], [t for _, t in leases]))


async def lease_of(conn: Conn, job_id: uuid.UUID) -> asyncpg.Record:
    """status, kind, lease_token, attempts of a job (JobNotFound when there is none)."""
    row = await conn.fetchrow(
        "select status, kind, lease_token, attempts from jobs where id = $1", job_id)
    if row is None:
        raise JobNotFound(str(job_id))
    return row


async def leases_of(conn: Conn, job_ids: list[uuid.UUID]) -> dict[uuid.UUID, asyncpg.Record]:
    """status, kind, lease_token and attempts of the jobs that exist among ``job_ids``, by id."""
    rows = await conn.fetch("select id, status, kind, lease_token, attempts from jobs "
                            "where id = any($1::uuid[])", job_ids)
    return {r["id"]: r for r in rows}


async def lost(conn: Conn, job_id: uuid.UUID) -> LeaseLost:
    """The LeaseLost of a job not held with the caller's token (JobNotFound when none)."""
    return LeaseLost(job_id, (await lease_of(conn, job_id))["status"])


_FINISH = (
    "update jobs set status = 'succeeded', result = $3, error = null, lease_token = null, "
    "lease_expires_at = null, updated_at = now() "
    "where id = $1 and lease_token = $2 and status = 'leased' returning kind, payload"
)


async def finish(conn: Conn, job_id: uuid.UUID, token: str,
                 result: dict[str, Any]) -> asyncpg.Record | None:
    """Mark a job held with ``token`` succeeded; its kind and payload, None if not held."""
    return await conn.fetchrow(_FINISH, job_id, token, result)


async def complete_episode(conn: Conn, job_id: uuid.UUID, *, success: bool | None,
                           score: float | None, answer: str | None,
                           result: dict[str, Any]) -> None:
    await conn.execute(
        "update episodes set status = 'completed', success = $2, score = $3, answer = $4, "
        "result = $5, finished_at = now(), updated_at = now(), "
        # a batch that pins no version: the version its last attempt ran (the worker keeps
        # every step of an attempt on the version of its first plan; none: the base model)
        "planner_version = coalesce(planner_version, (select s.body ->> 'planner_version' "
        "from steps s where s.episode_id = episodes.id order by s.attempt desc, s.idx limit 1))"
        " where job_id = $1",
        job_id, success, score, answer, result)


async def held_for_update(conn: Conn, job_id: uuid.UUID, token: str) -> asyncpg.Record | None:
    """attempts, max_attempts of a job held with ``token``, row-locked."""
    return await conn.fetchrow(
        "select attempts, max_attempts from jobs "
        "where id = $1 and lease_token = $2 and status = 'leased' for update", job_id, token)


async def settle(conn: Conn, job_ids: list[uuid.UUID], *, final: bool, error: str) -> JobStatus:
    """Move leased jobs back to queued, or to failed when ``final``; mirror on episodes."""
    status = JobStatus.FAILED if final else JobStatus.QUEUED
    await conn.execute(
        "update jobs set status = $1, error = $2, lease_token = null, lease_expires_at = null, "
        "worker_id = null, updated_at = now() where id = any($3)", status.value, error, job_ids)
    await conn.execute(
        "update episodes set status = $1, error = $2, updated_at = now(), "
        "finished_at = case when $4 then now() else null end where job_id = any($3)",
        "failed" if final else "queued", error, job_ids, final)
    return status


# One statement: a leased job back to queued with its attempt not counted, mirrored on its
# episode; the steps that attempt reported go (the next lease runs that attempt number again).
_RELEASE = (
    "with job as ("
    " update jobs set status = 'queued', attempts = greatest(jobs.attempts - 1, 0),"
    " error = $3, lease_token = null, lease_expires_at = null, worker_id = null,"
    " updated_at = now() where id = $1 and lease_token = $2 and status = 'leased'"
    " returning id, kind, attempts), "
    "episode as ("
    " update episodes set status = 'queued', attempts = job.attempts, error = $3,"
    " updated_at = now() from job where episodes.job_id = job.id returning episodes.id), "
    "gone as ("
    " delete from steps using episode, job where steps.episode_id = episode.id"
    " and steps.attempt = job.attempts + 1) "
    "select kind, attempts from job"
)


async def release(conn: Conn, job_id: uuid.UUID, token: str,
                  reason: str) -> asyncpg.Record | None:
    """Give a job held with ``token`` back uncounted (kind, attempts); None when not held."""
    return await conn.fetchrow(_RELEASE, job_id, token, reason)


async def for_expiry(conn: Conn, ids: list[uuid.UUID]) -> list[asyncpg.Record]:
    return list(await conn.fetch(
        "select id, status, lease_token, attempts, max_attempts from jobs "
        "where id = any($1) order by id for update", ids))


async def leased_for_update(conn: Conn, *, ids: list[uuid.UUID] | None = None,
                            worker_ids: list[uuid.UUID] | None = None) -> list[asyncpg.Record]:
    """id, lease_token, attempts, max_attempts of the leased jobs among ``ids`` or held by
    ``worker_ids``, row-locked in id order (call inside the caller's transaction)."""
    return list(await conn.fetch(
        "select id, lease_token, attempts, max_attempts from jobs where status = 'leased' "
        "and (id = any($1::uuid[]) or worker_id = any($2::uuid[])) order by id for update",
        ids or [], worker_ids or []))


async def cancel_batch(conn: asyncpg.Connection, batch_id: uuid.UUID) -> list[asyncpg.Record]:
    """Cancel the batch's queued and leased jobs and their episodes (call inside the cancel's
    transaction); the cancelled jobs' id and kind."""
    rows = list(await conn.fetch(
        f"with locked as (select id from jobs where batch_id = $1 and {ACTIVE_JOBS} "
        "order by id for update) "
        "update jobs set status = 'cancelled', lease_token = null, lease_expires_at = null, "
        "updated_at = now() from locked where jobs.id = locked.id returning jobs.id, jobs.kind",
        batch_id))
    await conn.execute(
        "update episodes set status = 'cancelled', finished_at = now(), updated_at = now() "
        "where job_id = any($1)", [r["id"] for r in rows])
    return rows


async def active_counts(conn: Conn) -> dict[tuple[str, str], int]:
    """(kind, status) -> number of queued and leased jobs: the one count behind the status
    page, the metrics and the queue check."""
    rows = await conn.fetch("select kind, status, count(*) n from jobs "
                            f"where {ACTIVE_JOBS} group by kind, status")
    return {(r["kind"], r["status"]): r["n"] for r in rows}


async def active(conn: Conn) -> list[asyncpg.Record]:
    """Every queued or leased job (for rebuilding the Redis queue)."""
    return list(await conn.fetch(
        "select id, kind, status, priority, seq, lease_token, lease_expires_at from jobs "
        f"where {ACTIVE_JOBS}"))


async def state(conn: Conn, job_id: uuid.UUID) -> JobState:
    row = await conn.fetchrow(
        "select id, kind, status, attempts, max_attempts, error from jobs where id = $1", job_id)
    if row is None:
        raise JobNotFound(str(job_id))
    return JobState(id=row["id"], kind=JobKind(row["kind"]), status=row["status"],
                    attempts=row["attempts"], max_attempts=row["max_attempts"],
                    error=row["error"])
