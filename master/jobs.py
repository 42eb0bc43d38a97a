"""Job lifecycle: enqueue, lease, heartbeat, step reports, complete, fail, expire, cancel.

Postgres decides (a transition happens only if the row still carries the caller's lease
token); Redis only orders ready jobs and indexes lease expiry. Every transition of an
``episode`` job is mirrored on its episode row in the same transaction.
"""

from __future__ import annotations

import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from coda.contracts.records import (
    EpisodeResult,
    EpisodeStatus,
    Job,
    JobKind,
    JobStatus,
    Step,
)
from coda.logging import get_logger
from master.queue.redis_queue import RedisQueue

log = get_logger("coda.master.jobs")


class LeaseLost(Exception):
    """The job is not held with this token (expired, requeued, finished or cancelled)."""

    def __init__(self, job_id: uuid.UUID, status: str | None) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(
            f"job {job_id} is not leased with this token (job status: {status or 'unknown'})")


class JobNotFound(Exception):
    pass


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


_INSERT_JOB = text(
    "insert into jobs (id, kind, status, priority, payload, attempts, max_attempts, batch_id) "
    "values (:id, :kind, 'queued', :priority, :payload, 0, :max_attempts, :batch_id)"
).bindparams(bindparam("payload", type_=JSONB))


async def insert_jobs(conn: AsyncConnection, jobs: list[NewJob]) -> None:
    if jobs:
        await conn.execute(_INSERT_JOB, [
            {"id": j.id, "kind": j.kind.value, "priority": j.priority, "payload": j.payload,
             "max_attempts": j.max_attempts, "batch_id": j.batch_id} for j in jobs])


async def publish(conn: AsyncConnection, queue: RedisQueue, job_ids: list[uuid.UUID]) -> None:
    """Push committed queued jobs to Redis (idempotent)."""
    if not job_ids:
        return
    rows = (await conn.execute(
        text("select id, kind, priority, seq from jobs where id = any(:ids) and status = 'queued'"),
        {"ids": job_ids})).all()
    by_kind: dict[str, list[tuple[str, int, int]]] = {}
    for r in rows:
        by_kind.setdefault(r.kind, []).append((str(r.id), r.priority, r.seq))
    for kind, items in by_kind.items():
        await queue.push(kind, items)


async def enqueue(engine: AsyncEngine, queue: RedisQueue, jobs: list[NewJob]) -> None:
    async with engine.begin() as conn:
        await insert_jobs(conn, jobs)
    async with engine.connect() as conn:
        await publish(conn, queue, [j.id for j in jobs])


_CLAIM = text(
    "update jobs set status = 'leased', lease_token = v.token, attempts = jobs.attempts + 1, "
    "worker_id = :worker, lease_expires_at = :expires, updated_at = now() "
    "from (select unnest(cast(:ids as uuid[])) as id, unnest(cast(:tokens as text[])) as token) v "
    "where jobs.id = v.id and jobs.status = 'queued' "
    "returning jobs.id, jobs.kind, jobs.payload, jobs.attempts, jobs.max_attempts, jobs.lease_token"
)

_EPISODES_RUNNING = text(
    "update episodes set status = 'running', attempts = j.attempts, error = null, "
    "started_at = coalesce(episodes.started_at, now()), updated_at = now() "
    "from jobs j where j.id = episodes.job_id and j.id = any(:ids)"
)


async def lease(
    engine: AsyncEngine, queue: RedisQueue, *, worker_id: uuid.UUID, kind: JobKind,
    capacity: int, ttl_s: float,
) -> list[Job]:
    """Hand out up to ``capacity`` ready jobs of ``kind``; each gets a fresh token."""
    expires = datetime.now(UTC) + timedelta(seconds=ttl_s)
    tokens = [new_token() for _ in range(capacity)]
    ids = await queue.lease(kind, tokens, _ms(expires))
    if not ids:
        return []
    token_of = dict(zip(ids, tokens, strict=False))
    async with engine.begin() as conn:
        rows = (await conn.execute(_CLAIM, {
            "ids": [uuid.UUID(i) for i in ids], "tokens": [token_of[i] for i in ids],
            "worker": worker_id, "expires": expires})).all()
        if kind is JobKind.EPISODE and rows:
            await conn.execute(_EPISODES_RUNNING, {"ids": [r.id for r in rows]})
    rank = {i: n for n, i in enumerate(ids)}
    rows = sorted(rows, key=lambda r: rank[str(r.id)])  # queue order, not Postgres' order
    granted = {str(r.id) for r in rows}
    for stray in set(ids) - granted:  # cancelled or finished meanwhile: drop the Redis lease
        await queue.release(stray, token_of[stray])
    return [Job(id=r.id, kind=JobKind(r.kind), lease_token=r.lease_token, lease_expires_at=expires,
                attempt=r.attempts, max_attempts=r.max_attempts, payload=r.payload) for r in rows]


async def _status(conn: AsyncConnection, job_id: uuid.UUID) -> str:
    row = (await conn.execute(text("select status from jobs where id = :id"),
                              {"id": job_id})).first()
    if row is None:
        raise JobNotFound(str(job_id))
    return str(row.status)


async def heartbeat(
    engine: AsyncEngine, queue: RedisQueue, *, job_id: uuid.UUID, token: str, ttl_s: float,
) -> datetime:
    """Extend a lease. Before a rebuild after Redis data loss, Postgres vouches for the token."""
    expires = datetime.now(UTC) + timedelta(seconds=ttl_s)
    if await queue.heartbeat(str(job_id), token, _ms(expires)):
        return expires
    async with engine.connect() as conn:
        row = (await conn.execute(
            text("select status, lease_token from jobs where id = :id"), {"id": job_id})).first()
    if row is None:
        raise JobNotFound(str(job_id))
    if row.status == JobStatus.LEASED and row.lease_token == token and not await queue.is_built():
        return expires
    raise LeaseLost(job_id, row.status)


_STEP = text(
    "insert into steps (episode_id, attempt, idx, body) "
    "select e.id, j.attempts, :idx, :body from jobs j join episodes e on e.job_id = j.id "
    "where j.id = :job and j.lease_token = :token and j.status = 'leased' "
    "on conflict (episode_id, attempt, idx) do update set body = excluded.body "
    "returning episode_id"
).bindparams(bindparam("body", type_=JSONB))


async def report_step(engine: AsyncEngine, *, job_id: uuid.UUID, token: str, step: Step) -> None:
    """Store a step of the episode this job runs (idempotent per attempt and index)."""
    body = step.model_dump(mode="json", exclude={"created_at"})
    async with engine.begin() as conn:
        row = (await conn.execute(_STEP, {"job": job_id, "token": token, "idx": step.index,
                                          "body": body})).first()
        if row is None:
            raise LeaseLost(job_id, await _status(conn, job_id))


_FINISH = text(
    "update jobs set status = :status, result = :result, error = :error, lease_token = null, "
    "lease_expires_at = null, updated_at = now() "
    "where id = :id and lease_token = :token and status = 'leased' "
    "returning id, kind, payload, attempts, max_attempts"
).bindparams(bindparam("result", type_=JSONB))


async def complete(
    engine: AsyncEngine, queue: RedisQueue, *, job_id: uuid.UUID, token: str,
    result: dict[str, Any],
) -> None:
    async with engine.begin() as conn:
        row = (await conn.execute(_FINISH, {"id": job_id, "token": token, "result": result,
                                            "status": JobStatus.SUCCEEDED.value,
                                            "error": None})).first()
        if row is None:
            raise LeaseLost(job_id, await _status(conn, job_id))
        if row.kind == JobKind.EPISODE:
            res = EpisodeResult.model_validate(result)
            await conn.execute(text(
                "update episodes set status = 'completed', success = :success, score = :score, "
                "answer = :answer, result = :result, finished_at = now(), updated_at = now() "
                "where job_id = :id").bindparams(bindparam("result", type_=JSONB)),
                {"id": job_id, "success": res.success, "answer": res.answer, "result": result,
                 "score": res.score if res.score is not None else (
                     None if res.success is None else float(res.success))})
        elif row.kind == JobKind.GROUP and isinstance(result.get("group"), dict):
            from master.groups import insert_group  # local: groups import jobs helpers

            await insert_group(conn, result["group"])
    await queue.release(str(job_id), token)


async def fail(
    engine: AsyncEngine, queue: RedisQueue, *, job_id: uuid.UUID, token: str, error: str,
    retry: bool,
) -> JobStatus:
    """The worker gave up on this attempt: requeue while attempts remain, else fail the job."""
    async with engine.begin() as conn:
        row = (await conn.execute(text(
            "select attempts, max_attempts from jobs "
            "where id = :id and lease_token = :token and status = 'leased' for update"),
            {"id": job_id, "token": token})).first()
        if row is None:
            raise LeaseLost(job_id, await _status(conn, job_id))
        final = not retry or row.attempts >= row.max_attempts
        reason = error if not final or not retry else (
            f"{error} (gave up after {row.attempts} attempts)")
        status = await _settle(conn, [job_id], final=final, error=reason)
    await queue.release(str(job_id), token)
    if status is JobStatus.QUEUED:
        async with engine.connect() as conn:
            await publish(conn, queue, [job_id])
    return status


async def _settle(conn: AsyncConnection, job_ids: list[uuid.UUID], *, final: bool,
                  error: str) -> JobStatus:
    """Move leased jobs back to queued, or to failed when ``final``; mirror on episodes."""
    status = JobStatus.FAILED if final else JobStatus.QUEUED
    await conn.execute(text(
        "update jobs set status = :status, error = :error, lease_token = null, "
        "lease_expires_at = null, worker_id = null, updated_at = now() where id = any(:ids)"),
        {"status": status.value, "error": error, "ids": job_ids})
    ep_status = EpisodeStatus.FAILED if final else EpisodeStatus.QUEUED
    await conn.execute(text(
        "update episodes set status = :status, error = :error, updated_at = now(), "
        "finished_at = case when :final then now() else null end where job_id = any(:ids)"),
        {"status": ep_status.value, "error": error, "ids": job_ids, "final": final})
    return status


async def expire_leases(engine: AsyncEngine, queue: RedisQueue, *, limit: int = 1000) -> int:
    """Requeue (attempt+1) or fail jobs whose lease ran out. Returns how many were handled."""
    claimed = await queue.claim_expired(int(time.time() * 1000), limit)
    if not claimed:
        return 0
    ids = [uuid.UUID(i) for i, _ in claimed]
    token_of = {uuid.UUID(i): t for i, t in claimed}
    requeue: list[uuid.UUID] = []
    async with engine.begin() as conn:
        rows = (await conn.execute(text(
            "select id, status, lease_token, attempts, max_attempts from jobs "
            "where id = any(:ids) for update"), {"ids": ids})).all()
        retry, dead = [], []
        for r in rows:
            if r.status == JobStatus.QUEUED:  # popped but never claimed (master died between)
                requeue.append(r.id)
            elif r.status == JobStatus.LEASED and r.lease_token == token_of[r.id]:
                (dead if r.attempts >= r.max_attempts else retry).append(r)
        if retry:
            await _settle(conn, [r.id for r in retry], final=False, error="lease expired")
            requeue += [r.id for r in retry]
        for r in dead:
            await _settle(conn, [r.id], final=True,
                          error=f"lease expired on attempt {r.attempts} of {r.max_attempts}")
    async with engine.connect() as conn:
        await publish(conn, queue, requeue)
    if retry or dead:
        log.info("leases expired", requeued=len(retry), failed=len(dead))
    return len(claimed)


async def cancel_jobs(engine: AsyncEngine, queue: RedisQueue, *, batch_id: uuid.UUID) -> int:
    async with engine.begin() as conn:
        rows = (await conn.execute(text(
            "update jobs set status = 'cancelled', lease_token = null, lease_expires_at = null, "
            "updated_at = now() where batch_id = :b and status in ('queued', 'leased') "
            "returning id, kind"), {"b": batch_id})).all()
        await conn.execute(text(
            "update episodes set status = 'cancelled', finished_at = now(), updated_at = now() "
            "where batch_id = :b and status in ('queued', 'running')"), {"b": batch_id})
    by_kind: dict[str, list[str]] = {}
    for r in rows:
        by_kind.setdefault(r.kind, []).append(str(r.id))
    for kind, ids in by_kind.items():
        await queue.remove(kind, ids)
    return len(rows)


async def reconcile(engine: AsyncEngine, queue: RedisQueue, *, ttl_s: float) -> dict[str, int]:
    """Make Redis agree with Postgres: re-add missing ready jobs and leases, drop strays."""
    now = datetime.now(UTC)
    grace = _ms(now + timedelta(seconds=ttl_s))
    added = removed = leases = 0
    # Redis first, Postgres second: anything that changes in between is settled by Postgres.
    leased_now = await queue.leased_ids()
    present_by_kind = {k.value: await queue.ready_ids(k) for k in JobKind}
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select id, kind, status, priority, seq, lease_token, lease_expires_at from jobs "
            "where status in ('queued', 'leased')"))).all()
    queued: dict[str, list[tuple[str, int, int]]] = {k.value: [] for k in JobKind}
    held = []
    for r in rows:
        if r.status == JobStatus.QUEUED:
            queued[r.kind].append((str(r.id), r.priority, r.seq))
        else:
            exp = max(_ms(r.lease_expires_at) if r.lease_expires_at else 0, grace)
            held.append((str(r.id), r.lease_token, exp))
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
    leases = len(missing_leases)
    await queue.mark_built()
    if added or removed or leases:
        log.info("queue reconciled", added=added, removed=removed, leases_restored=leases)
    return {"added": added, "removed": removed, "leases_restored": leases}
