"""The master at fleet scale, through real master processes: one batched heartbeat call for
all of a worker's leases, several master processes sharing one queue."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.jobs import EpisodeResult
from coda.contracts.master_api import HEARTBEAT_BATCH_MAX
from tests.master.conftest import submit


def _requests(master, route: str) -> float:  # type: ignore[no-untyped-def]
    """http_requests_total of one route (all codes) on one master process."""
    import httpx

    total = 0.0
    for line in httpx.get(f"{master.url}/metrics", timeout=30).text.splitlines():
        if line.startswith("http_requests_total{") and f'route="{route}"' in line:
            total += float(line.split()[-1])
    return total


async def test_one_call_heartbeats_every_lease_and_names_the_lost(master, admin, wclient,
                                                                   worker):
    await submit(admin, n_tasks=2, rollouts=2)
    a, b, c, d = await wclient.lease(worker.id, capacity=4)
    await wclient.complete(b, EpisodeResult(success=True))  # finished: its lease is gone
    forged = c.model_copy(update={"lease_token": "x" * 32})  # a token the master never gave
    ghost = a.model_copy(update={"id": uuid.uuid4()})  # no such job
    # the 2 s leases outlive 3 s of the master's clock only through the batched heartbeats
    for beat_no in range(3):
        got = await wclient.heartbeat_leases([a, b, forged, ghost, d])
        assert [beat.job_id for beat in got.leases] == [a.id, b.id, c.id, ghost.id, d.id]
        assert [beat.outcome for beat in got.leases] == [
            "extended", "lost", "lost", "lost", "extended"]
        statuses = [beat.status for beat in got.leases]
        # c's real lease (never extended) expires meanwhile: leased, then queued again
        assert statuses[:2] + statuses[3:] == [None, "succeeded", None, None]
        assert statuses[2] == "leased" if beat_no == 0 else statuses[2] in ("leased", "queued")
        assert got.leases[0].lease_expires_at is not None
        master.advance_clock(1)
    assert _requests(master, "/v1/jobs/heartbeat") == 3
    assert _requests(master, "/v1/jobs/{job_id}/heartbeat") == 0
    # the kept leases still hold (and the old per-job route still answers)
    for job in (a, d):
        await wclient.heartbeat(job)
        await wclient.complete(job, EpisodeResult(success=True))


async def test_a_batch_is_bounded(wclient, worker):
    with pytest.raises(ServiceError) as err:
        await wclient.send("POST", "/v1/jobs/heartbeat", {"leases": []})
    assert err.value.status == 422
    ref = {"job_id": str(uuid.uuid4()), "lease_token": "x" * 32}
    with pytest.raises(ServiceError) as err:
        await wclient.send("POST", "/v1/jobs/heartbeat",
                           {"leases": [ref] * (HEARTBEAT_BATCH_MAX + 1)})
    assert err.value.status == 422 and "leases" in str(err.value.detail)


async def test_two_master_processes_share_the_queue_and_the_leases(master_factory, master,
                                                                    admin, worker):
    """A job submitted on one master process is leased through the other, heartbeated in a
    batch on the first and completed on the second."""
    second = master_factory()
    async with MasterClient(master.url, token=master.worker_token, retries=1) as one, \
            MasterClient(second.url, token=master.worker_token, retries=1) as two:
        created = await submit(admin, n_tasks=1)  # on the first process
        [job] = await two.lease(worker.id)
        assert job.payload.batch_id == created.batch.id
        [beat] = (await one.heartbeat_leases([job])).leases
        assert beat.outcome == "extended"
        await two.complete(job, EpisodeResult(success=True))
        [beat] = (await one.heartbeat_leases([job])).leases
        assert beat.outcome == "lost" and beat.status == "succeeded"


async def test_the_worker_keeps_all_its_leases_with_one_call(master, admin, wclient, worker):
    """The worker's lease keeping (:class:`worker.leases.LeaseKeeper`): one call per beat for
    every lease it holds; a lease the master answers lost cancels that job's work only."""
    from worker.leases import LeaseKeeper

    await submit(admin, n_tasks=3)
    jobs = await wclient.lease(worker.id, capacity=3)
    keeper = LeaseKeeper(wclient, interval_s=3600, batch_max=2)
    works = [asyncio.create_task(asyncio.Event().wait()) for _ in jobs]
    lost = [keeper.hold(job, work) for job, work in zip(jobs, works, strict=True)]
    before = _requests(master, "/v1/jobs/heartbeat")
    assert await keeper.beat() == 0
    assert _requests(master, "/v1/jobs/heartbeat") == before + 2  # 3 leases, 2 per call
    await wclient.complete(jobs[1], EpisodeResult(success=True))  # the lease ends elsewhere
    master.advance_clock(1.5)  # within the 2 s TTL the beat extended
    assert await keeper.beat() == 1
    assert lost[1].is_set() and not lost[0].is_set() and not lost[2].is_set()
    await asyncio.gather(*works[1:2], return_exceptions=True)
    assert works[1].cancelled() and not works[0].done() and not works[2].done()
    master.advance_clock(1.5)  # past the first TTL: only the beats kept jobs 0 and 2
    for n in (0, 2):
        keeper.drop(jobs[n].id)
        works[n].cancel()
        await wclient.complete(jobs[n], EpisodeResult(success=True))
