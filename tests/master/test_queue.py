"""The lease queue against real Redis and Postgres, through a real master process."""

from __future__ import annotations

import asyncio
import signal
import threading
import uuid

import asyncpg
import httpx
import pytest
import redis.asyncio as aioredis

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.jobs import EpisodeResult
from coda.contracts.master_api import WorkerRegister
from coda.contracts.records import EpisodeStatus, JobKind, Step
from coda.urls import to_plain_postgres_url
from tests.fixtures.waiting import wait_for_async
from tests.master.conftest import submit


async def test_lease_heartbeat_step_complete(master, admin, wclient, worker):
    created = await submit(admin, n_tasks=2, rollouts=2)
    jobs = await wclient.lease(worker.id, capacity=10)
    assert len(jobs) == 4
    assert all(j.attempt == 1 and j.kind is JobKind.EPISODE for j in jobs)
    assert len({j.lease_token for j in jobs}) == 4
    job = jobs[0]
    for _ in range(3):  # heartbeats keep it past its 2 s TTL (the master's clock moves 3 s)
        await wclient.heartbeat(job)
        master.advance_clock(1)
    await wclient.heartbeat(job)
    await wclient.report_step(job, Step(index=0, thought="open the menu"))
    # delivery is at least once: a repeated report is idempotent
    await wclient.report_step(job, Step(index=0, thought="open the menu"))
    await wclient.report_step(job, Step(index=1, thought="click"))
    await wclient.complete(job, EpisodeResult(success=True, answer="42"))
    ep = await admin.get_episode(job.payload.episode_id)
    assert ep.status is EpisodeStatus.COMPLETED and ep.success is True and ep.answer == "42"
    assert [s.index for s in ep.steps or []] == [0, 1]
    batch = await admin.get_batch(created.batch.id)
    assert batch.progress.completed == 1 and batch.progress.succeeded == 1


async def test_expired_lease_is_requeued_with_next_attempt(master, admin, wclient, worker):
    await submit(admin, n_tasks=1, max_attempts=3)
    [first] = await wclient.lease(worker.id)
    # no heartbeat: the 2 s lease expires (the clock moves past it) and the job comes back
    # as attempt 2
    master.advance_clock(3)
    again = await wclient.lease(worker.id, wait_s=15)
    assert len(again) == 1 and again[0].id == first.id and again[0].attempt == 2
    # the old token is now stale: every write with it is refused without effect
    for call in (wclient.heartbeat(first), wclient.complete(first, EpisodeResult(success=True)),
                 wclient.report_step(first, Step(index=0))):
        with pytest.raises(ServiceError) as err:
            await call
        assert err.value.status == 409
    ep = await admin.get_episode(first.payload.episode_id)
    assert ep.status is EpisodeStatus.RUNNING and ep.attempts == 2 and ep.steps == []
    await wclient.complete(again[0], EpisodeResult(success=False))
    ep = await admin.get_episode(first.payload.episode_id)
    assert ep.status is EpisodeStatus.COMPLETED and ep.success is False


async def test_max_attempts_then_failed_with_reason(master, admin, wclient, worker):
    await submit(admin, n_tasks=1, max_attempts=2)
    [job] = await wclient.lease(worker.id)
    state = await wclient.fail(job, "VM failed to become ready")
    assert state.status == "queued" and state.attempts == 1
    [job2] = await wclient.lease(worker.id)
    assert job2.attempt == 2
    # second attempt is abandoned silently: the expiry sweep ends it past max attempts
    master.advance_clock(3)
    async def failed() -> bool:
        return (await wclient.get_job(job2.id)).status == "failed"
    await wait_for_async(failed, "the expiry sweep to fail the job past its attempts")
    state = await wclient.get_job(job2.id)
    assert "lease expired on attempt 2 of 2" in (state.error or "")
    ep = await admin.get_episode(job2.payload.episode_id)
    assert ep.status is EpisodeStatus.FAILED and "lease expired" in (ep.error or "")
    assert await wclient.lease(worker.id) == []


async def test_fail_without_retry_is_final(admin, wclient, worker):
    await submit(admin, n_tasks=1, max_attempts=5)
    [job] = await wclient.lease(worker.id)
    state = await wclient.fail(job, "task checker crashed", retry=False)
    assert state.status == "failed" and state.error == "task checker crashed"


async def test_stale_completion_changes_nothing(admin, wclient, worker):
    await submit(admin, n_tasks=1)
    [job] = await wclient.lease(worker.id)
    await wclient.complete(job, EpisodeResult(success=True))
    with pytest.raises(ServiceError) as err:
        await wclient.complete(job, EpisodeResult(success=False))
    assert err.value.status == 409
    forged = job.model_copy(update={"lease_token": "x" * 32})
    with pytest.raises(ServiceError):
        await wclient.complete(forged, EpisodeResult(success=False))
    ep = await admin.get_episode(job.payload.episode_id)
    assert ep.success is True


async def test_priorities_then_fifo(admin, wclient, worker):
    low = await submit(admin, n_tasks=2, priority=-5, name="low")
    high = await submit(admin, n_tasks=2, priority=10, name="high")
    mid = await submit(admin, n_tasks=2, name="mid")
    order = [j.payload.batch_id for j in await wclient.lease(worker.id, capacity=6)]
    ids = [b.batch.id for b in (high, high, mid, mid, low, low)]
    assert order == ids
    # FIFO within a priority: task order of the batch is kept
    again = await submit(admin, n_tasks=3, name="fifo")
    got = await wclient.lease(worker.id, capacity=3)
    assert [j.payload.episode_id for j in got] == again.episode_ids


async def test_cancel_batch(admin, wclient, worker):
    created = await submit(admin, n_tasks=3)
    [running] = await wclient.lease(worker.id)
    batch = await admin.cancel_batch(created.batch.id)
    assert batch.status.value == "cancelled"
    assert batch.progress.cancelled == 3
    assert await wclient.lease(worker.id) == []
    with pytest.raises(ServiceError) as err:
        await wclient.heartbeat(running)
    assert err.value.status == 409 and "cancelled" in str(err.value.detail)


async def _polling(master) -> None:  # type: ignore[no-untyped-def]
    """Until a lease request is long-polling on the master (its gauge, not a sleep)."""
    async def waiting() -> bool:
        return await asyncio.to_thread(master.metric, "coda_lease_polls_waiting") >= 1
    await wait_for_async(waiting, "a lease request long-polling on the master")


async def test_long_poll_returns_when_work_arrives(master, admin, wclient, worker):
    waiter = asyncio.create_task(wclient.lease(worker.id, wait_s=30))
    await _polling(master)
    assert not waiter.done()
    await submit(admin, n_tasks=1)
    assert len(await waiter) == 1


async def test_redis_data_loss_rebuilds_queue(master, admin, wclient, worker):
    await submit(admin, n_tasks=3, rollouts=2)
    held = await wclient.lease(worker.id, capacity=2)
    r = aioredis.from_url(master.env["CODA_REDIS_URL"])
    await r.flushdb()  # Redis loses everything (this test's logical db only)
    # a held lease stays valid through the loss: Postgres vouches for it
    await wclient.heartbeat(held[0])

    async def rebuilt() -> bool:
        return bool(await r.exists(f"{master.env['CODA_REDIS_PREFIX']}:built"))
    await wait_for_async(rebuilt, "the queue rebuilt in Redis")
    await r.aclose()
    rest = await wclient.lease(worker.id, capacity=10)
    assert len(rest) == 4  # nothing lost, nothing duplicated
    assert not {j.id for j in rest} & {j.id for j in held}
    for job in held + rest:
        await wclient.heartbeat(job)
        await wclient.complete(job, EpisodeResult(success=True))
    status = await admin.status()
    assert status.batches[0].progress.completed == 6


async def test_master_restart_mid_batch_loses_nothing(master_factory):
    master = master_factory(CODA_LEASE_TTL_S="60")  # leases outlive the restart
    async with MasterClient(master.url, token=master.admin_token) as admin, \
            MasterClient(master.url, token=master.worker_token) as wclient:
        worker = await wclient.register_worker(WorkerRegister(name="w", slots=2))
        created = await submit(admin, n_tasks=3, rollouts=2)
        first = await wclient.lease(worker.id, capacity=2)
        await wclient.report_step(first[0], Step(index=0, thought="before restart"))
        master.restart(kill=True)
        await _finish_after_restart(admin, wclient, worker, created, first)


async def _finish_after_restart(admin, wclient, worker, created, first):  # type: ignore[no-untyped-def]
    for job in first:  # leases survive the restart
        await wclient.heartbeat(job)
        await wclient.complete(job, EpisodeResult(success=True))
    rest = await wclient.lease(worker.id, capacity=10)
    assert len(rest) == 4
    for job in rest:
        await wclient.complete(job, EpisodeResult(success=False))
    batch = await admin.get_batch(created.batch.id)
    assert batch.status.value == "finished"
    assert batch.progress.completed == 6 and batch.progress.succeeded == 2
    ep = await admin.get_episode(first[0].payload.episode_id)
    assert [s.thought for s in ep.steps or []] == ["before restart"]


async def test_replicas_share_the_queue(master_factory, master, admin, worker):
    second = master_factory()
    await submit(admin, n_tasks=4, rollouts=2)
    async with MasterClient(master.url, token=master.worker_token) as a, \
            MasterClient(second.url, token=master.worker_token) as b:
        got = await asyncio.gather(*(c.lease(worker.id, capacity=1)
                                     for c in (a, b) * 6))
        ids = [j.id for batch in got for j in batch]
        assert len(ids) == 8 and len(set(ids)) == 8  # each job to exactly one caller
        # a lease taken on one replica is completed on the other
        job = next(j for batch in got for j in batch)
        await b.complete(job, EpisodeResult(success=True))
        with pytest.raises(ServiceError):
            await a.complete(job, EpisodeResult(success=True))


async def test_invalid_episode_result_is_refused_without_change(admin, wclient, worker):
    await submit(admin, n_tasks=1)
    [job] = await wclient.lease(worker.id)
    with pytest.raises(ServiceError) as err:  # as a worker of another version might send it
        await wclient.send("POST", f"/v1/jobs/{job.id}/complete", {
            "lease_token": job.lease_token, "kind": "episode",
            "result": {"success": "maybe", "score": 7}})
    assert err.value.status == 422
    fields = {tuple(e["loc"]) for e in err.value.detail}
    assert {("body", "episode", "result", "success"),
            ("body", "episode", "result", "score")} <= fields, fields
    assert (await wclient.get_job(job.id)).status == "leased"  # nothing changed
    await wclient.complete(job, EpisodeResult(success=True))  # the lease still holds


def test_sigterm_ends_open_long_polls_at_once(master, worker):
    """A lease long-polling for 60 s returns (no job) as soon as the master is told to stop,
    and the master exits: shutdown does not wait for wait_s."""
    assert master.proc is not None
    answer: dict[str, object] = {}

    def poll() -> None:
        r = httpx.post(f"{master.url}/v1/jobs/lease", timeout=120,
                       headers={"Authorization": f"Bearer {master.worker_token}"},
                       json={"worker_id": str(worker.id), "wait_s": 60})
        answer.update(status=r.status_code, body=r.json())

    t = threading.Thread(target=poll)
    t.start()
    asyncio.run(_polling(master))  # the poll is waiting on the master
    master.proc.send_signal(signal.SIGTERM)
    master.proc.wait(30)  # an upper bound only: without the shutdown event it takes 60 s
    master.proc = None
    t.join(30)
    assert answer == {"status": 200, "body": {"jobs": []}}


async def test_a_stored_payload_that_does_not_fit_its_kind_fails_its_job(
        master, wclient, worker):
    """A job row written before the payloads were typed (a hand-made group job with a free
    payload) is not handed to a worker: the lease fails it for good, naming the payload, and
    answers as if the queue were empty (no 500)."""
    job_id = uuid.uuid4()
    pg = await asyncpg.connect(to_plain_postgres_url(master.env["CODA_DATABASE_URL"]))
    try:
        await pg.execute("insert into jobs (id, kind, status, priority, payload, attempts, "
                         "max_attempts) values ($1, 'group', 'queued', 0, $2::jsonb, 0, 3)",
                         job_id, '{"state": "s"}')
    finally:
        await pg.close()

    async def failed() -> bool:  # the reconcile loop puts the row into the Redis queue
        assert await wclient.lease(worker.id, JobKind.GROUP, wait_s=0.5) == []
        return (await wclient.get_job(job_id)).status == "failed"
    await wait_for_async(failed, "the unfit stored payload to fail its job")
    state = await wclient.get_job(job_id)
    assert state.error is not None and state.error.startswith(
        "payload: does not fit the group job contract") and "episode_id" in state.error
