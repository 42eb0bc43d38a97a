"""Job lifecycle: enqueue, lease, heartbeat, step reports, complete, fail, expire, cancel.

Postgres decides (a transition happens only if the row still carries the caller's lease
token); Redis only orders ready jobs and indexes lease expiry. Every transition of an
``episode`` job is mirrored on its episode row in the same statement or transaction.

This is the master's hot path (every environment slot calls it every few seconds), so it
talks to Postgres through a raw asyncpg pool (``master.db.pg``) with one round trip per call
where it can; the rest of the master uses SQLAlchemy.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias, TypeVar

import asyncpg
from pydantic import BaseModel, ValidationError

from coda.contracts.master_api import GroupJobResult, JudgeJobPayload, JudgeJobResult
from coda.contracts.records import EpisodeResult, Job, JobKind, JobStatus, Step
from coda.logging import get_logger
from master.queue.redis_queue import RedisQueue

log = get_logger("coda.master.jobs")

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool
M = TypeVar("M", bound=BaseModel)


class LeaseLost(Exception):
    """The job is not held with this token (expired, requeued, finished or cancelled)."""

    def __init__(self, job_id: uuid.UUID, status: str | None) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(
            f"job {job_id} is not leased with this token (job status: {status or 'unknown'})")


class JobNotFound(Exception):
    pass


class InvalidResult(ValueError):
    """A completion whose result does not fit the job's kind (nothing was changed)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("invalid result")
        self.errors = errors


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


def _ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


async def insert_jobs(conn: Conn, jobs: list[NewJob]) -> None:
    if jobs:
        await conn.executemany(
            "insert into jobs (id, kind, status, priority, payload, attempts, max_attempts, "
            "batch_id) values ($1, $2, 'queued', $3, $4, 0, $5, $6)",
            [(j.id, j.kind.value, j.priority, j.payload, j.max_attempts, j.batch_id)
             for j in jobs])


async def insert_job_once(conn: Conn, job: NewJob) -> bool:
    """Insert ``job`` unless a job with its id exists (a follow-up whose id derives from what
    it is about); whether it was inserted."""
    got = await conn.fetchval(
        "insert into jobs (id, kind, status, priority, payload, attempts, max_attempts, "
        "batch_id) values ($1, $2, 'queued', $3, $4, 0, $5, $6) on conflict (id) do nothing "
        "returning id", job.id, job.kind.value, job.priority, job.payload, job.max_attempts,
        job.batch_id)
    return got is not None


async def publish(pg: Conn, queue: RedisQueue, job_ids: Iterable[uuid.UUID]) -> None:
    """Push committed queued jobs to Redis (idempotent)."""
    ids = list(job_ids)
    if not ids:
        return
    rows = await pg.fetch(
        "select id, kind, priority, seq from jobs where id = any($1) and status = 'queued'", ids)
    by_kind: dict[str, list[tuple[str, int, int]]] = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append((str(r["id"]), r["priority"], r["seq"]))
    for kind, items in by_kind.items():
        await queue.push(kind, items)


async def enqueue(pg: asyncpg.Pool, queue: RedisQueue, jobs: list[NewJob]) -> None:
    async with pg.acquire() as conn, conn.transaction():
        await insert_jobs(conn, jobs)
    await publish(pg, queue, [j.id for j in jobs])


# One statement: claim the popped jobs that are still queued and mirror it on their episodes.
_CLAIM = (
    "with claimed as ("
    " update jobs set status = 'leased', lease_token = v.token, attempts = jobs.attempts + 1,"
    " worker_id = $3, lease_expires_at = $4, updated_at = now()"
    " from unnest($1::uuid[], $2::text[]) as v(id, token)"
    " where jobs.id = v.id and jobs.status = 'queued'"
    " returning jobs.id, jobs.kind, jobs.payload, jobs.attempts, jobs.max_attempts,"
    " jobs.lease_token), "
    "running as ("
    " update episodes set status = 'running', attempts = c.attempts, error = null,"
    " started_at = coalesce(episodes.started_at, now()), updated_at = now()"
    " from claimed c where c.id = episodes.job_id and c.kind = 'episode') "
    "select * from claimed"
)


async def lease(
    pg: asyncpg.Pool, queue: RedisQueue, *, worker_id: uuid.UUID, kind: JobKind,
    capacity: int, ttl_s: float,
) -> list[Job]:
    """Hand out up to ``capacity`` ready jobs of ``kind``; each gets a fresh token."""
    expires = datetime.now(UTC) + timedelta(seconds=ttl_s)
    tokens = [new_token() for _ in range(capacity)]
    ids = await queue.lease(kind, tokens, _ms(expires))
    if not ids:
        return []
    token_of = dict(zip(ids, tokens, strict=False))
    rows = await pg.fetch(_CLAIM, [uuid.UUID(i) for i in ids], [token_of[i] for i in ids],
                          worker_id, expires)
    rank = {i: n for n, i in enumerate(ids)}
    rows = sorted(rows, key=lambda r: rank[str(r["id"])])  # queue order, not Postgres' order
    granted = {str(r["id"]) for r in rows}
    for stray in set(ids) - granted:  # cancelled or finished meanwhile: drop the Redis lease
        await queue.release(stray, token_of[stray])
    return [Job(id=r["id"], kind=JobKind(r["kind"]), lease_token=r["lease_token"],
                lease_expires_at=expires, attempt=r["attempts"], max_attempts=r["max_attempts"],
                payload=r["payload"]) for r in rows]


async def _lost(pg: Conn, job_id: uuid.UUID) -> LeaseLost:
    status = await pg.fetchval("select status from jobs where id = $1", job_id)
    if status is None:
        raise JobNotFound(str(job_id))
    return LeaseLost(job_id, status)


async def heartbeat(
    pg: asyncpg.Pool, queue: RedisQueue, *, job_id: uuid.UUID, token: str, ttl_s: float,
) -> datetime:
    """Extend a lease. Before a rebuild after Redis data loss, Postgres vouches for the token."""
    expires = datetime.now(UTC) + timedelta(seconds=ttl_s)
    if await queue.heartbeat(str(job_id), token, _ms(expires)):
        return expires
    row = await pg.fetchrow("select status, lease_token from jobs where id = $1", job_id)
    if row is None:
        raise JobNotFound(str(job_id))
    if (row["status"] == JobStatus.LEASED and row["lease_token"] == token
            and not await queue.is_built()):
        return expires
    raise LeaseLost(job_id, row["status"])


class StepRefused(Exception):
    """A step report the lease does not allow (another attempt, or a job without steps)."""


# The lease decides the attempt: the stored step carries the job's attempt, and a report that
# names another one matches no row (see report_step).
_STEP = (
    "insert into steps (episode_id, attempt, idx, body) "
    "select e.id, j.attempts, $3::int, jsonb_set($4::jsonb, '{attempt}', to_jsonb(j.attempts)) "
    "from jobs j join episodes e on e.job_id = j.id "
    "where j.id = $1 and j.lease_token = $2 and j.status = 'leased' "
    "and ($5::int is null or $5::int = j.attempts) "
    "on conflict (episode_id, attempt, idx) do update set body = excluded.body "
    "returning episode_id"
)


async def report_step(pg: asyncpg.Pool, *, job_id: uuid.UUID, token: str, step: Step) -> None:
    """Store a step of the episode this job runs (idempotent per attempt and index)."""
    body = step.model_dump(mode="json", exclude={"created_at"})
    if await pg.fetchval(_STEP, job_id, token, step.index, body, step.attempt) is not None:
        return
    row = await pg.fetchrow(
        "select kind, status, lease_token, attempts from jobs where id = $1", job_id)
    if row is None:
        raise JobNotFound(str(job_id))
    if row["status"] != JobStatus.LEASED or row["lease_token"] != token:
        raise LeaseLost(job_id, row["status"])
    if row["kind"] != JobKind.EPISODE:
        raise StepRefused(f"job {job_id} is a {row['kind']} job: only episode jobs have steps")
    raise StepRefused(f"step.attempt: {step.attempt} is not the attempt of this lease "
                      f"({row['attempts']}); leave it out, the master sets it")


_FINISH = (
    "update jobs set status = 'succeeded', result = $3, error = null, lease_token = null, "
    "lease_expires_at = null, updated_at = now() "
    "where id = $1 and lease_token = $2 and status = 'leased' returning kind, payload"
)


async def complete(
    pg: asyncpg.Pool, queue: RedisQueue, *, job_id: uuid.UUID, token: str,
    result: dict[str, Any], staleness_versions: int = 2,
) -> JobKind:
    """Finish a leased job with its result; an episode, judge or group result is validated
    first (422 without any change when it does not fit). Its follow-ups are made in the same
    transaction (:mod:`master.lifecycle`): an episode's judge job, a verdict's group jobs, a
    group job's group."""
    from master import lifecycle  # lifecycle uses this module's job rows

    follow_ups: list[uuid.UUID] = []
    async with pg.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(_FINISH, job_id, token, result)
        if row is None:
            raise await _lost(conn, job_id)
        kind = row["kind"]
        # an invalid result raises here, inside the transaction: nothing is changed
        if kind == JobKind.EPISODE:
            res = _validated(EpisodeResult, result)
            score = res.score if res.score is not None else (
                None if res.success is None else float(res.success))
            await conn.execute(
                "update episodes set status = 'completed', success = $2, score = $3, "
                "answer = $4, result = $5, finished_at = now(), updated_at = now() "
                "where job_id = $1", job_id, res.success, score, res.answer, result)
            follow_ups = await lifecycle.after_episode(conn, job_id)
        elif kind == JobKind.JUDGE:
            verdict = _validated(JudgeJobResult, result).verdict
            payload = _validated(JudgeJobPayload, row["payload"])
            try:
                _, follow_ups = await lifecycle.apply_verdict(conn, payload.episode_id,
                                                              verdict)
            except lifecycle.EpisodeNotFound as exc:
                raise InvalidResult([{"loc": ["body", "result"], "msg": str(exc),
                                      "type": "not_found"}]) from exc
        elif kind == JobKind.GROUP:
            group = _validated(GroupJobResult, result).group
            await lifecycle.store_group(conn, group,
                                        source=lifecycle.group_source_of(row["payload"]),
                                        window_size=staleness_versions)
    await queue.release(str(job_id), token)
    await publish(pg, queue, follow_ups)
    return JobKind(kind)


def _validated(model: type[M], result: dict[str, Any]) -> M:
    try:
        return model.model_validate(result)
    except ValidationError as exc:  # rolls the transaction back: nothing changes
        raise InvalidResult([{"loc": ["body", "result", *e["loc"]], "msg": e["msg"],
                              "type": e["type"]} for e in exc.errors()]) from exc


async def fail(
    pg: asyncpg.Pool, queue: RedisQueue, *, job_id: uuid.UUID, token: str, error: str,
    retry: bool,
) -> JobStatus:
    """The worker gave up on this attempt: requeue while attempts remain, else fail the job."""
    async with pg.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            "select attempts, max_attempts from jobs "
            "where id = $1 and lease_token = $2 and status = 'leased' for update", job_id, token)
        if row is None:
            raise await _lost(conn, job_id)
        final = not retry or row["attempts"] >= row["max_attempts"]
        reason = f"{error} (gave up after {row['attempts']} attempts)" if final and retry \
            else error
        status = await _settle(conn, [job_id], final=final, error=reason)
    await queue.release(str(job_id), token)
    if status is JobStatus.QUEUED:
        await publish(pg, queue, [job_id])
    return status


async def _settle(conn: Conn, job_ids: list[uuid.UUID], *, final: bool,
                  error: str) -> JobStatus:
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


async def job_kind(pg: asyncpg.Pool, job_id: uuid.UUID) -> JobKind:
    kind = await pg.fetchval("select kind from jobs where id = $1", job_id)
    if kind is None:
        raise JobNotFound(str(job_id))
    return JobKind(kind)


async def expire_leases(pg: asyncpg.Pool, queue: RedisQueue, *, limit: int = 1000) -> int:
    """Requeue (attempt+1) or fail jobs whose lease ran out. Returns how many were handled."""
    claimed = await queue.claim_expired(int(time.time() * 1000), limit)
    if not claimed:
        return 0
    token_of = {uuid.UUID(i): t for i, t in claimed}
    requeue: list[uuid.UUID] = []
    retry: list[uuid.UUID] = []
    dead: list[asyncpg.Record] = []
    async with pg.acquire() as conn, conn.transaction():
        rows = await conn.fetch(
            "select id, status, lease_token, attempts, max_attempts from jobs "
            "where id = any($1) for update", list(token_of))
        for r in rows:
            if r["status"] == JobStatus.QUEUED:  # popped, never claimed (master died between)
                requeue.append(r["id"])
            elif r["status"] == JobStatus.LEASED and r["lease_token"] == token_of[r["id"]]:
                if r["attempts"] >= r["max_attempts"]:
                    dead.append(r)
                else:
                    retry.append(r["id"])
        if retry:
            await _settle(conn, retry, final=False, error="lease expired")
            requeue += retry
        for r in dead:
            await _settle(conn, [r["id"]], final=True,
                          error=f"lease expired on attempt {r['attempts']} of {r['max_attempts']}")
    await publish(pg, queue, requeue)
    if retry or dead:
        log.info("leases expired", requeued=len(retry), failed=len(dead))
    return len(claimed)


async def cancel_jobs(pg: asyncpg.Pool, queue: RedisQueue, *, batch_id: uuid.UUID) -> int:
    async with pg.acquire() as conn, conn.transaction():
        rows = await conn.fetch(
            "update jobs set status = 'cancelled', lease_token = null, lease_expires_at = null, "
            "updated_at = now() where batch_id = $1 and status in ('queued', 'leased') "
            "returning id, kind", batch_id)
        await conn.execute(
            "update episodes set status = 'cancelled', finished_at = now(), updated_at = now() "
            "where batch_id = $1 and status in ('queued', 'running')", batch_id)
    by_kind: dict[str, list[str]] = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append(str(r["id"]))
    for kind, ids in by_kind.items():
        await queue.remove(kind, ids)
    return len(rows)


async def queue_agrees(pg: asyncpg.Pool, queue: RedisQueue) -> bool:
    """A cheap check (counts only): do Redis and Postgres hold as many ready and leased jobs?
    A mismatch, even a passing one from a transition in flight, calls for :func:`reconcile`."""
    leased, ready = await queue.sizes(list(JobKind))
    rows = await pg.fetch("select kind, status, count(*) n from jobs "
                          "where status in ('queued', 'leased') group by kind, status")
    want_ready = {k.value: 0 for k in JobKind}
    want_leased = 0
    for r in rows:
        if r["status"] == JobStatus.QUEUED:
            want_ready[r["kind"]] = r["n"]
        else:
            want_leased += r["n"]
    return ready == want_ready and leased == want_leased


async def reconcile(pg: asyncpg.Pool, queue: RedisQueue, *, ttl_s: float) -> dict[str, int]:
    """Make Redis agree with Postgres: re-add missing ready jobs and leases, drop strays."""
    grace = _ms(datetime.now(UTC) + timedelta(seconds=ttl_s))
    # Redis first (one atomic snapshot), Postgres second: what changes in between is settled
    # by Postgres.
    leased_now, present_by_kind = await queue.snapshot(list(JobKind))
    rows = await pg.fetch(
        "select id, kind, status, priority, seq, lease_token, lease_expires_at from jobs "
        "where status in ('queued', 'leased')")
    queued: dict[str, list[tuple[str, int, int]]] = {k.value: [] for k in JobKind}
    held = []
    for r in rows:
        if r["status"] == JobStatus.QUEUED:
            queued[r["kind"]].append((str(r["id"]), r["priority"], r["seq"]))
        else:
            exp = max(_ms(r["lease_expires_at"]) if r["lease_expires_at"] else 0, grace)
            held.append((str(r["id"]), r["lease_token"], exp))
    added = removed = 0
    for kind, items in queued.items():
        present = present_by_kind[kind]
        want = {i for i, _, _ in items}
        missing = [it for it in items if it[0] not in present and it[0] not in leased_now]
        await queue.push(kind, missing)
        stray = list(present - want)
        if stray:
            await queue.r.zrem(queue.k.ready(kind), *stray)
        added += len(missing)
        removed += len(stray)
    missing_leases = [h for h in held if h[0] not in leased_now]
    await queue.hold(missing_leases)
    await queue.mark_built()
    if added or removed or missing_leases:
        log.info("queue reconciled", added=added, removed=removed,
                 leases_restored=len(missing_leases))
    return {"added": added, "removed": removed, "leases_restored": len(missing_leases)}
