"""A batch cancel racing leases, step reports, completions and failures (real master, real
Postgres and Redis, many concurrent calls): afterwards every job of the batch is cancelled or
finished, its episodes agree with its jobs, and Redis holds no cancelled job (no ready-set
member, no lease, no token)."""

from __future__ import annotations

import asyncio
import random
import uuid

import asyncpg
import redis.asyncio as aioredis

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.jobs import EpisodeResult, Job, JudgeJobResult
from coda.contracts.master_api import WorkerRegister
from coda.contracts.records import JobKind, Step
from coda.contracts.training import Verdict
from coda.urls import to_plain_postgres_url
from tests.fixtures.master import TEST_CLOCK
from tests.fixtures.waiting import wait_for_async
from tests.master.conftest import submit

EPISODE_OF_JOB = {"cancelled": "cancelled", "succeeded": "completed", "failed": "failed"}
LOOPS = 8


async def _work(client: MasterClient, worker: uuid.UUID, rng: random.Random,
                done: asyncio.Event, finished: list[int]) -> None:
    """Lease and finish jobs of every kind as fast as the master answers, until the cancel is
    done and nothing is left to lease; a 409 (the cancel won) is part of the race."""
    while True:
        got: list[Job] = []
        for kind in (JobKind.EPISODE, JobKind.JUDGE):
            got += await client.lease(worker, kind, capacity=rng.randint(1, 3))
        if not got and done.is_set():
            return
        for job in got:
            try:
                if job.kind is JobKind.EPISODE and rng.random() < 0.5:
                    await client.report_step(job, Step(index=0, thought="race"))
                if rng.random() < 0.2:
                    await client.fail(job, "raced", retry=rng.random() < 0.5)
                elif job.kind is JobKind.EPISODE:
                    await client.complete(job, EpisodeResult(success=rng.random() < 0.5))
                    finished.append(1)
                else:
                    await client.complete(job, JudgeJobResult(verdict=Verdict(correct=False)))
            except ServiceError as exc:
                assert exc.status == 409, (exc.status, exc.detail)
        await asyncio.sleep(0)


async def _cancel_when(admin: MasterClient, batch: uuid.UUID, finished: list[int], after: int,
                       done: asyncio.Event) -> None:
    async def enough() -> bool:
        return len(finished) >= after

    try:
        await wait_for_async(enough, f"{after} episodes finished before the cancel", 60,
                             interval=0.01)
        # two cancels at once: the second is a no-op, neither may break the other
        got = await asyncio.gather(admin.cancel_batch(batch), admin.cancel_batch(batch))
        assert all(b.status.value == "cancelled" for b in got)
    finally:  # the workers end once nothing is left to lease, even when this failed
        done.set()


async def _check(master, batch: uuid.UUID) -> None:  # type: ignore[no-untyped-def]
    pg = await asyncpg.connect(to_plain_postgres_url(master.env["CODA_DATABASE_URL"]))
    r = aioredis.from_url(master.env["CODA_REDIS_URL"], decode_responses=True)
    try:
        jobs = {str(j["id"]): j for j in await pg.fetch(
            "select j.id, j.kind, j.status, j.lease_token, e.status episode from jobs j "
            "left join episodes e on e.job_id = j.id where j.batch_id = $1", batch)}
        assert jobs and await pg.fetchval("select status from batches where id = $1",
                                          batch) == "cancelled"
        for jid, j in jobs.items():
            assert j["status"] in EPISODE_OF_JOB, (jid, j["status"])
            assert j["lease_token"] is None, jid
            if j["kind"] == JobKind.EPISODE:
                assert j["episode"] == EPISODE_OF_JOB[j["status"]], (jid, dict(j))
        cancelled = {jid for jid, j in jobs.items() if j["status"] == "cancelled"}
        assert cancelled, "the cancel came too late to cancel anything"
        prefix = master.env["CODA_REDIS_PREFIX"]
        in_redis = set(await r.zrange(f"{prefix}:leases", 0, -1))
        in_redis |= set(await r.hkeys(f"{prefix}:tokens"))
        for kind in JobKind:
            in_redis |= set(await r.zrange(f"{prefix}:ready:{kind.value}", 0, -1))
        assert not in_redis & set(jobs), in_redis & set(jobs)
    finally:
        await pg.close()
        await r.aclose()


async def test_cancel_racing_lease_and_complete_leaves_rows_and_redis_consistent(
        master_factory) -> None:  # type: ignore[no-untyped-def]
    master = master_factory(CODA_LEASE_TTL_S="60", **TEST_CLOCK)
    async with MasterClient(master.url, token=master.admin_token, retries=1) as admin, \
            MasterClient(master.url, token=master.worker_token, retries=1) as wclient:
        worker = (await wclient.register_worker(WorkerRegister(name="racer", slots=8))).id
        for round_, after in enumerate((3, 10, 25)):
            created = await submit(admin, n_tasks=10, rollouts=4, name=f"race-{round_}")
            rng = random.Random(round_)
            done = asyncio.Event()
            finished: list[int] = []
            await asyncio.gather(
                _cancel_when(admin, created.batch.id, finished, after, done),
                *(_work(wclient, worker, random.Random(rng.random()), done, finished)
                  for _ in range(LOOPS)))
            await _check(master, created.batch.id)
