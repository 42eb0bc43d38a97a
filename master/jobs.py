"""The queue: enqueue, lease, heartbeat, step reports, complete, fail, expire, cancel.

Postgres decides (a transition happens only if the row still carries the caller's lease
token); Redis only orders ready jobs and indexes lease expiry. Every transition of an
``episode`` job is mirrored on its episode row in the same statement or transaction. The SQL
lives in :mod:`master.repos`; lease times come from the process's :class:`~master.clock.Clock`.

This is the master's hot path (every environment slot calls it every few seconds): one round
trip to Postgres per call where it can.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Iterable
from datetime import datetime
from typing import Any

import asyncpg
from pydantic import TypeAdapter, ValidationError

from coda.bounds import MAX_ERROR_TEXT
from coda.contracts.jobs import (
    EpisodeResult,
    GroupJobPayload,
    GroupJobResult,
    Job,
    JobResult,
    JudgeJobPayload,
)
from coda.contracts.records import JobKind, JobStatus, Step
from coda.logging import get_logger
from master import idempotency, lifecycle
from master.clock import Clock, ms
from master.db.pg import Conn
from master.errors import EpisodeNotFound, InvalidResult, JobNotFound, LeaseLost, StepRefused
from master.queue.redis_queue import RedisQueue
from master.repos import batches as batch_rows
from master.repos import jobs as job_rows
from master.repos import steps as step_rows
from master.repos.jobs import NewJob, new_token
from master.unavailable import INFRASTRUCTURE

log = get_logger("coda.master.jobs")

LEASED_JOB: TypeAdapter[Job] = TypeAdapter(Job)


async def publish(pg: asyncpg.Pool, queue: RedisQueue, job_ids: Iterable[uuid.UUID]) -> None:
    """Push committed queued jobs to Redis (idempotent). The rows stay share-locked until they
    are pushed, so a cancel committing meanwhile waits and then removes them: a cancelled job
    never stays in a ready set."""
    ids = list(job_ids)
    if not ids:
        return
    async with pg.acquire() as conn, conn.transaction():
        rows = await job_rows.queued_for_push(conn, ids)
        by_kind: dict[str, list[tuple[str, int, int]]] = {}
        for r in rows:
            by_kind.setdefault(r["kind"], []).append((str(r["id"]), r["priority"], r["seq"]))
        for kind, items in by_kind.items():
            await queue.push(kind, items)


async def after_commit(what: str, step: Awaitable[object]) -> None:
    """A Redis step after a committed change (push the jobs it queued, drop a lease it ended).
    Postgres decides and has decided: when Redis (or the network) fails here, the change
    stands and the answer says so; the reconciler (:func:`reconcile`, every
    ``reconcile_interval_s`` and at once after Redis lost its data) makes Redis agree."""
    try:
        await step
    except INFRASTRUCTURE as exc:
        log.warning("queue.deferred", step=what, error=f"{type(exc).__name__}: {exc}"[:300],
                    action="the reconciler brings Redis up to date when it answers")


async def enqueue(pg: asyncpg.Pool, queue: RedisQueue, jobs: list[NewJob], *,
                  key: str | None = None, digest: str = "") -> dict[str, Any] | None:
    """Insert queued jobs and push them to Redis. With an idempotency ``key`` (scope
    ``jobs``): a key taken before returns what its request answered (``{"id", "kind"}`` of its
    first job) and inserts nothing; None when the jobs were inserted now."""
    async with pg.acquire() as conn, conn.transaction():
        if key is not None:
            earlier = await idempotency.reserve(conn, "jobs", key, digest)
            if earlier is not None:
                return earlier
        await job_rows.insert(conn, jobs)
        if key is not None and jobs:
            await idempotency.answer(conn, "jobs", key,
                                     {"id": str(jobs[0].id), "kind": jobs[0].kind.value})
    await after_commit("publish", publish(pg, queue, [j.id for j in jobs]))
    return None


async def lease(
    pg: asyncpg.Pool, queue: RedisQueue, clock: Clock, *, worker_id: uuid.UUID, kind: JobKind,
    capacity: int, ttl_s: float,
) -> list[Job]:
    """Hand out up to ``capacity`` ready jobs of ``kind``; each gets a fresh token."""
    expires = clock.after(ttl_s)
    tokens = [new_token() for _ in range(capacity)]
    ids = await queue.lease(kind, tokens, ms(expires))
    if not ids:
        return []
    token_of = dict(zip(ids, tokens, strict=False))
    rows = await job_rows.claim(pg, [uuid.UUID(i) for i in ids], [token_of[i] for i in ids],
                                worker_id=worker_id, expires=expires)
    rank = {i: n for n, i in enumerate(ids)}
    rows = sorted(rows, key=lambda r: rank[str(r["id"])])  # queue order, not Postgres' order
    granted = {str(r["id"]) for r in rows}
    for stray in set(ids) - granted:  # cancelled or finished meanwhile: drop the Redis lease
        await queue.release(stray, token_of[stray])
    leased, unfit = [], []
    for r in rows:
        try:
            leased.append(_leased(r, expires))
        except ValidationError as exc:
            unfit.append((r, exc))
    for row, error in unfit:
        await _fail_unfit(pg, queue, row, error)
    return leased


def _leased(r: asyncpg.Record, expires: datetime) -> Job:
    return LEASED_JOB.validate_python({
        "id": r["id"], "kind": r["kind"], "lease_token": r["lease_token"],
        "lease_expires_at": expires, "attempt": r["attempts"],
        "max_attempts": r["max_attempts"], "payload": r["payload"]})


async def leased_again(pg: asyncpg.Pool, leases: list[tuple[uuid.UUID, str]]) -> list[Job]:
    """The jobs a lease handed out that are still held with their tokens (a retried lease
    whose first answer was lost gets them again), in the order given."""
    rows = {r["id"]: r for r in await job_rows.held(pg, leases)}
    return [_leased(rows[i], rows[i]["lease_expires_at"]) for i, _ in leases if i in rows]


async def _fail_unfit(pg: asyncpg.Pool, queue: RedisQueue, row: asyncpg.Record,
                      exc: ValidationError) -> None:
    """A stored payload that does not fit its kind's contract (a row written before the
    contract said so) fails its job for good: no worker could run it."""
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                         for e in exc.errors()[:5])
    error = f"payload: does not fit the {row['kind']} job contract ({problems})"[:MAX_ERROR_TEXT]
    log.warning("queue.payload_unfit", job=str(row["id"]), kind=row["kind"], error=error)
    async with pg.acquire() as conn, conn.transaction():
        await job_rows.settle(conn, [row["id"]], final=True, error=error)
    await queue.release(str(row["id"]), row["lease_token"])


async def heartbeat(
    pg: asyncpg.Pool, queue: RedisQueue, clock: Clock, *, job_id: uuid.UUID, token: str,
    ttl_s: float,
) -> datetime:
    """Extend a lease. Before a rebuild after Redis data loss, Postgres vouches for the token."""
    expires = clock.after(ttl_s)
    if await queue.heartbeat(str(job_id), token, ms(expires)):
        return expires
    row = await job_rows.lease_of(pg, job_id)
    if (row["status"] == JobStatus.LEASED and row["lease_token"] == token
            and not await queue.is_built()):
        return expires
    raise LeaseLost(job_id, row["status"])


async def heartbeat_many(
    pg: asyncpg.Pool, queue: RedisQueue, clock: Clock, *, leases: list[tuple[uuid.UUID, str]],
    ttl_s: float,
) -> list[tuple[datetime | None, str | None]]:
    """Extend many leases in one Redis round trip (a worker's batched heartbeat). For each
    lease, in order: ``(expires, None)`` when extended, ``(None, status)`` when lost (the
    job's status, None when there is no such job). Postgres is asked only about the leases
    Redis did not extend: it vouches for them before a rebuild after Redis data loss."""
    expires = clock.after(ttl_s)
    held = await queue.heartbeat_many([(str(j), t) for j, t in leases], ms(expires))
    out: list[tuple[datetime | None, str | None]] = [
        (expires, None) if ok else (None, None) for ok in held]
    missed = [n for n, ok in enumerate(held) if not ok]
    if missed:
        rows = await job_rows.leases_of(pg, list({leases[n][0] for n in missed}))
        built = await queue.is_built()
        for n in missed:
            job_id, token = leases[n]
            row = rows.get(job_id)
            if row is None:
                continue
            if (not built and row["status"] == JobStatus.LEASED
                    and row["lease_token"] == token):
                out[n] = (expires, None)
            else:
                out[n] = (None, row["status"])
    return out


LABEL_BY_MASTER = "step.label: set by the master from the episode's verdict, not by a worker"

StepRefusal = LeaseLost | JobNotFound | StepRefused
"""Why a step report was not stored: the job is not held with its token (:class:`LeaseLost`;
:class:`JobNotFound` when there is no such job) or the report does not fit the lease
(:class:`StepRefused`)."""


async def report_steps(pg: asyncpg.Pool,
                       reports: list[tuple[uuid.UUID, str, Step]]) -> list[StepRefusal | None]:
    """Store step reports ``(job_id, token, step)`` of the episodes their jobs run (a single
    report is a batch of one; a worker's batched call sends many) in one statement,
    idempotent per attempt and index. For each, in the order sent: None when stored, else why
    not. A report that sets ``step.label`` is refused: the master labels steps from the
    judge's verdict, and a worker's label would be taken for one. Of reports of one job, token
    and index, the last is stored and the others are answered as it is."""
    answers: list[StepRefusal | None] = [None] * len(reports)
    last: dict[tuple[uuid.UUID, str, int], int] = {}
    for n, (job_id, token, step) in enumerate(reports):
        if step.label is not None:
            answers[n] = StepRefused(LABEL_BY_MASTER, field="step.label")
        else:
            last[(job_id, token, step.index)] = n
    kept = sorted(last.values())
    stored = await step_rows.insert_for_lease(pg, [reports[n] for n in kept])
    refused = [n for k, n in enumerate(kept) if k not in stored]
    if refused:
        rows = await job_rows.leases_of(pg, list({reports[n][0] for n in refused}))
        for n in refused:
            job_id, token, step = reports[n]
            answers[n] = _refusal(job_id, rows.get(job_id), token, step)
    for n, (job_id, token, step) in enumerate(reports):
        if step.label is None:
            answers[n] = answers[last[(job_id, token, step.index)]]
    return answers


def _refusal(job_id: uuid.UUID, row: asyncpg.Record | None, token: str,
             step: Step) -> StepRefusal:
    """Why a report the lease did not allow was not stored (``row``: the job's lease, None
    when there is no such job)."""
    if row is None:
        return JobNotFound(str(job_id))
    if row["status"] != JobStatus.LEASED or row["lease_token"] != token:
        return LeaseLost(job_id, row["status"])
    if row["kind"] != JobKind.EPISODE:
        return StepRefused(f"job {job_id} is a {row['kind']} job: only episode jobs have steps")
    return StepRefused(f"step.attempt: {step.attempt} is not the attempt of this lease "
                       f"({row['attempts']}); leave it out, the master sets it")


async def complete(
    pg: asyncpg.Pool, queue: RedisQueue, *, job_id: uuid.UUID, token: str, kind: JobKind,
    result: JobResult, staleness_versions: int = 2,
) -> JobKind:
    """Finish a leased job of ``kind`` with its result (the request's contract typed it; a
    kind other than the job's is refused, 422 without any change). Its follow-ups are made in
    the same transaction (:mod:`master.lifecycle`): an episode's judge job, a verdict's group
    jobs, a group job's group."""
    follow_ups: list[uuid.UUID] = []
    stored = result.model_dump(mode="json")
    async with pg.acquire() as conn, conn.transaction():
        row = await job_rows.finish(conn, job_id, token, stored)
        if row is None:
            raise await job_rows.lost(conn, job_id)
        if row["kind"] != kind:  # raises inside the transaction: nothing is changed
            raise InvalidResult([{"loc": ["body", "kind"], "type": "value_error",
                                  "msg": f"job {job_id} is a {row['kind']} job, not {kind}"}])
        if isinstance(result, EpisodeResult):
            score = result.score if result.score is not None else (
                None if result.success is None else float(result.success))
            await job_rows.complete_episode(conn, job_id, success=result.success, score=score,
                                            answer=result.answer, result=stored)
            follow_ups = await lifecycle.after_episode(conn, job_id)
        elif isinstance(result, GroupJobResult):
            source = GroupJobPayload.model_validate(row["payload"])  # checked at the lease
            await lifecycle.store_group(conn, result.group, window_size=staleness_versions,
                                        source=lifecycle.group_source(
                                            source.episode_id, source.attempt, source.step_index))
        else:
            payload = JudgeJobPayload.model_validate(row["payload"])  # checked at the lease
            try:
                _, follow_ups = await lifecycle.apply_verdict(conn, payload.episode_id,
                                                              result.verdict)
            except EpisodeNotFound as exc:
                raise InvalidResult([{"loc": ["body", "result"], "msg": str(exc),
                                      "type": "not_found"}]) from exc
    await after_commit("release", queue.release(str(job_id), token))
    await after_commit("publish", publish(pg, queue, follow_ups))
    return kind


async def fail(
    pg: asyncpg.Pool, queue: RedisQueue, *, job_id: uuid.UUID, token: str, error: str,
    retry: bool,
) -> JobStatus:
    """The worker gave up on this attempt: requeue while attempts remain, else fail the job."""
    async with pg.acquire() as conn, conn.transaction():
        row = await job_rows.held_for_update(conn, job_id, token)
        if row is None:
            raise await job_rows.lost(conn, job_id)
        final = not retry or row["attempts"] >= row["max_attempts"]
        reason = f"{error} (gave up after {row['attempts']} attempts)" if final and retry \
            else error
        status = await job_rows.settle(conn, [job_id], final=final, error=reason)
    await after_commit("release", queue.release(str(job_id), token))
    if status is JobStatus.QUEUED:
        await after_commit("publish", publish(pg, queue, [job_id]))
    return status


async def release(pg: asyncpg.Pool, queue: RedisQueue, *, job_id: uuid.UUID, token: str,
                  reason: str) -> None:
    """The worker gives the job back for a fault that is not the job's (its desktop provider
    is down: unreachable, credentials refused, template or image missing): requeued with this
    attempt not counted, and the steps it reported dropped (the next lease runs the same
    attempt number). The job's ``error`` says why it came back."""
    row = await job_rows.release(pg, job_id, token, f"released: {reason}")
    if row is None:
        raise await job_rows.lost(pg, job_id)
    await after_commit("release", queue.release(str(job_id), token))
    await after_commit("publish", publish(pg, queue, [job_id]))
    log.info("queue.released", job=str(job_id), kind=row["kind"], attempts=row["attempts"],
             reason=reason[:200])


async def expire_leases(pg: asyncpg.Pool, queue: RedisQueue, clock: Clock, *,
                        limit: int = 1000) -> int:
    """Requeue (attempt+1) or fail jobs whose lease ran out by the clock's now
    (:func:`_give_back`). Returns how many were handled."""
    claimed = await queue.claim_expired(ms(clock.now()), limit)
    if not claimed:
        return 0
    token_of = {uuid.UUID(i): t for i, t in claimed}
    async with pg.acquire() as conn, conn.transaction():
        rows = await job_rows.for_expiry(conn, list(token_of))
        # popped, never claimed (the master died between): pushed again
        requeue = [r["id"] for r in rows if r["status"] == JobStatus.QUEUED]
        held = [r for r in rows if r["status"] == JobStatus.LEASED
                and r["lease_token"] == token_of[r["id"]]]
        retried, failed = await _give_back(conn, held, "lease expired")
    await publish(pg, queue, requeue + retried)
    if held:
        log.info("queue.leases_expired", requeued=len(retried), failed=failed)
    return len(claimed)


async def take_back(pg: asyncpg.Pool, queue: RedisQueue, *, why: str,
                    job_ids: list[uuid.UUID] | None = None,
                    worker_ids: list[uuid.UUID] | None = None) -> tuple[int, int]:
    """Give the leases of the jobs ``job_ids``, or of the jobs the workers ``worker_ids``
    hold, back to the queue at once, as an expired lease is (:func:`_give_back`; a revoked
    worker token): (requeued, failed)."""
    async with pg.acquire() as conn, conn.transaction():
        held = await job_rows.leased_for_update(conn, ids=job_ids, worker_ids=worker_ids)
        retried, failed = await _give_back(conn, held, why)
    for r in held:
        await queue.release(str(r["id"]), r["lease_token"])
    await publish(pg, queue, retried)
    return len(retried), failed


async def _give_back(conn: Conn, held: list[asyncpg.Record],
                     why: str) -> tuple[list[uuid.UUID], int]:
    """The one give-back of leases ended for the job's sake (expired, or their worker's token
    revoked), inside the caller's transaction, ``held`` row-locked: each job is requeued with
    its attempt counted, or failed when it was its last (``{why} on attempt n of m``). The ids
    requeued (to publish once committed) and how many failed."""
    retry = [r["id"] for r in held if r["attempts"] < r["max_attempts"]]
    dead = [r for r in held if r["attempts"] >= r["max_attempts"]]
    if retry:
        await job_rows.settle(conn, retry, final=False, error=why)
    for r in dead:
        await job_rows.settle(conn, [r["id"]], final=True,
                              error=f"{why} on attempt {r['attempts']} of {r['max_attempts']}")
    return retry, len(dead)


async def cancel_batch(pg: asyncpg.Pool, queue: RedisQueue, batch_id: uuid.UUID) -> int | None:
    """Cancel a batch: its status, its queued and leased jobs and their episodes in one
    transaction, then the jobs leave Redis (ready sets, lease index) atomically. A lease racing
    it claims nothing (Postgres refuses a cancelled job, and the stray Redis lease is
    released); a publish racing it holds its rows until pushed, so the removal comes after.
    Returns how many jobs were cancelled, None when there is no such batch."""
    async with pg.acquire() as conn, conn.transaction():
        if not await batch_rows.set_cancelled(conn, batch_id):
            return None
        rows = await job_rows.cancel_batch(conn, batch_id)
    by_kind: dict[str, list[str]] = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append(str(r["id"]))
    for kind, ids in by_kind.items():
        await after_commit("remove", queue.remove(kind, ids))
    return len(rows)


async def queue_agrees(pg: asyncpg.Pool, queue: RedisQueue) -> bool:
    """A cheap check (counts only): do Redis and Postgres hold as many ready and leased jobs?
    A mismatch, even a passing one from a transition in flight, calls for :func:`reconcile`."""
    leased, ready = await queue.sizes(list(JobKind))
    counts = await job_rows.active_counts(pg)
    want_ready = {k.value: counts.get((k.value, JobStatus.QUEUED.value), 0) for k in JobKind}
    want_leased = sum(n for (_, status), n in counts.items() if status == JobStatus.LEASED)
    return ready == want_ready and leased == want_leased


async def reconcile(pg: asyncpg.Pool, queue: RedisQueue, clock: Clock, *,
                    ttl_s: float) -> dict[str, int]:
    """Make Redis agree with Postgres: re-add missing ready jobs and leases, drop strays."""
    grace = ms(clock.after(ttl_s))
    # Redis first (one atomic snapshot), Postgres second: what changes in between is settled
    # by Postgres.
    leased_now, present_by_kind = await queue.snapshot(list(JobKind))
    queued: dict[str, set[str]] = {k.value: set() for k in JobKind}
    missing: list[uuid.UUID] = []
    held = []
    for r in await job_rows.active(pg):
        jid = str(r["id"])
        if r["status"] == JobStatus.QUEUED:
            queued[r["kind"]].add(jid)
            if jid not in present_by_kind[r["kind"]] and jid not in leased_now:
                missing.append(r["id"])
        else:
            exp = max(ms(r["lease_expires_at"]) if r["lease_expires_at"] else 0, grace)
            held.append((jid, r["lease_token"], exp))
    await publish(pg, queue, missing)  # re-read under lock: a cancel meanwhile is respected
    removed = 0
    for kind, want in queued.items():
        stray = list(present_by_kind[kind] - want)
        await queue.drop_ready(kind, stray)
        removed += len(stray)
    missing_leases = [h for h in held if h[0] not in leased_now]
    await queue.hold(missing_leases)
    await queue.mark_built()
    if missing or removed or missing_leases:
        log.info("queue.reconciled", added=len(missing), removed=removed,
                 leases_restored=len(missing_leases))
    return {"added": len(missing), "removed": removed, "leases_restored": len(missing_leases)}
