"""The master at fleet scale, through real master processes: one batched heartbeat call for
all of a worker's leases, several master processes sharing one queue."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid

import httpx
import pytest

from coda.clients.base import MAX_RETRY_AFTER_S, RETRY_AFTER_JITTER, ServiceError, after_hint
from coda.clients.master import MasterClient
from coda.contracts.jobs import EpisodeResult
from coda.contracts.master_api import HEARTBEAT_BATCH_MAX, STEP_BATCH_MAX, WorkerRegister
from coda.contracts.records import Step, StepLabel
from tests.fixtures.waiting import wait_for, wait_for_async
from tests.master.conftest import submit


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
    assert master.requests("/v1/jobs/heartbeat") == 3
    assert master.requests("/v1/jobs/{job_id}/heartbeat") == 0
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


async def test_one_call_stores_the_steps_of_many_jobs_and_names_the_rest(master, admin, wclient,
                                                                          worker):
    await submit(admin, n_tasks=2, rollouts=2)
    a, b, c, d = await wclient.lease(worker.id, capacity=4)
    await wclient.complete(b, EpisodeResult(success=True))  # finished: its lease is gone
    forged = c.model_copy(update={"lease_token": "x" * 32})
    before = master.requests("/v1/jobs/steps")
    got = await wclient.report_steps([
        (a, Step(index=0, thought="open")), (a, Step(index=1, thought="first")),
        (b, Step(index=0)), (forged, Step(index=0)), (d, Step(index=0, attempt=7)),
        (d, Step(index=1, label=StepLabel.POSITIVE)), (a, Step(index=1, thought="again")),
        (c, Step(index=0, thought="c's own"))])
    assert master.requests("/v1/jobs/steps") == before + 1
    assert [(r.job_id, r.index, r.outcome) for r in got.reports] == [
        (a.id, 0, "stored"), (a.id, 1, "stored"), (b.id, 0, "lost"), (c.id, 0, "lost"),
        (d.id, 0, "refused"), (d.id, 1, "refused"), (a.id, 1, "stored"), (c.id, 0, "stored")]
    assert got.reports[2].status == "succeeded" and got.reports[3].status == "leased"
    assert "step.attempt" in (got.reports[4].detail or "")
    assert "step.label" in (got.reports[5].detail or "")
    # the last report of one job and index is the one stored, as with one call per step
    ep = await admin.get_episode(a.payload.episode_id)
    assert [(s.index, s.thought, s.attempt) for s in ep.steps or []] == [
        (0, "open", 1), (1, "again", 1)]
    ep = await admin.get_episode(c.payload.episode_id)
    assert [s.thought for s in ep.steps or []] == ["c's own"]
    ep = await admin.get_episode(d.payload.episode_id)
    assert ep.steps == []


async def test_a_step_batch_is_bounded(wclient, worker):
    with pytest.raises(ServiceError) as err:
        await wclient.send("POST", "/v1/jobs/steps", {"reports": []})
    assert err.value.status == 422
    report = {"job_id": str(uuid.uuid4()), "lease_token": "x" * 32, "step": {"index": 0}}
    with pytest.raises(ServiceError) as err:
        await wclient.send("POST", "/v1/jobs/steps", {"reports": [report] * (STEP_BATCH_MAX + 1)})
    assert err.value.status == 422 and "reports" in str(err.value.detail)
    got = await wclient.send("POST", "/v1/jobs/steps", {"reports": [report]})
    assert got.json()["reports"] == [{"job_id": report["job_id"], "index": 0, "outcome": "lost",
                                      "status": None, "detail": None}]


async def test_the_worker_sends_its_slots_steps_in_one_call(master, admin, wclient, worker):
    """The worker's step reports (:class:`worker.steps.StepReporter`): the reports of all its
    slots wait for the window and go in one call; a slot that waits for its report sends the
    batch at once; a report the master answers lost raises :class:`LeaseGone`, one it refuses
    :class:`StepRefused` (no made-up HTTP error)."""
    from worker.leases import LeaseGone, StepRefused
    from worker.steps import StepReporter

    await submit(admin, n_tasks=3)
    jobs = await wclient.lease(worker.id, capacity=3)
    await wclient.complete(jobs[2], EpisodeResult(success=True))
    reporter = StepReporter(wclient, window_s=3600)
    sending = asyncio.create_task(reporter.run())
    before = master.requests("/v1/jobs/steps")
    reports = [asyncio.create_task(reporter.report(job, Step(index=0, thought=f"slot {n}")))
               for n, job in enumerate(jobs)]
    async def waiting(n: int) -> bool:
        return len(reporter.pending) == n

    await wait_for_async(lambda: waiting(3), "the three reports to wait for the window")
    # nothing is sent while the window runs and nobody waits
    assert master.requests("/v1/jobs/steps") == before and not any(r.done() for r in reports)
    reporter.hurry()  # a slot waits for its report: the batch goes now
    done = await asyncio.gather(*reports, return_exceptions=True)
    assert done[:2] == [None, None]
    assert type(done[2]) is LeaseGone and "succeeded" in str(done[2])
    assert master.requests("/v1/jobs/steps") == before + 1 and reporter.calls == 1
    for job in jobs[:2]:
        ep = await admin.get_episode(job.payload.episode_id)
        assert [s.index for s in ep.steps or []] == [0]
    # a slot that waits for a report whose task has not run yet: it goes at once when it comes
    quick = asyncio.create_task(reporter.report(jobs[0], Step(index=1)))
    reporter.hurry()
    await asyncio.wait_for(quick, timeout=60)  # the window is an hour: sent because hurried
    assert reporter.calls == 2
    # a report the lease does not allow: its typed refusal
    refused = asyncio.create_task(reporter.report(jobs[0], Step(index=3, attempt=7)))
    reporter.hurry()
    with pytest.raises(StepRefused, match=r"step\.attempt"):
        await asyncio.wait_for(refused, timeout=60)
    assert reporter.calls == 3
    # stopping: a report still waiting hears why
    late = asyncio.create_task(reporter.report(jobs[0], Step(index=2)))
    await wait_for_async(lambda: waiting(1), "the late report to wait")
    sending.cancel()
    await asyncio.gather(sending, return_exceptions=True)
    with pytest.raises(ServiceError) as err:
        await late
    assert err.value.status == 503


async def test_window_0_sends_each_step_report_at_once(master, admin, wclient, worker):
    """The reporter is always there: with window 0 a report goes at once, nobody hurrying it
    (a batch of one), and the master stores it as any other."""
    from worker.steps import StepReporter

    await submit(admin, n_tasks=1)
    [job] = await wclient.lease(worker.id)
    reporter = StepReporter(wclient, window_s=0)
    sending = asyncio.create_task(reporter.run())
    try:
        before = master.requests("/v1/jobs/steps")
        await asyncio.wait_for(reporter.report(job, Step(index=0, thought="at once")), 60)
        assert master.requests("/v1/jobs/steps") == before + 1 and reporter.calls == 1
    finally:
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
    ep = await admin.get_episode(job.payload.episode_id)
    assert [s.thought for s in ep.steps or []] == ["at once"]


async def test_a_step_batch_the_master_never_got_fails_every_report_in_it(admin, wclient,
                                                                          worker):
    """A batch call that fails (the master unreachable) fails each report in it with that
    error, as each single call would; the reporter goes on with the next batch."""
    from coda.procs import free_port
    from worker.steps import StepReporter

    await submit(admin, n_tasks=1)
    [job] = await wclient.lease(worker.id)
    async with MasterClient(f"http://127.0.0.1:{free_port()}", token="x" * 32,
                            retries=1) as gone:
        reporter = StepReporter(gone, window_s=0.05)
        sending = asyncio.create_task(reporter.run())
        results = await asyncio.gather(reporter.report(job, Step(index=0)),
                                       reporter.report(job, Step(index=1)),
                                       return_exceptions=True)
        assert all(isinstance(r, httpx.TransportError) for r in results), results
        assert reporter.calls == 1 and not sending.done()  # it goes on with the next batch
        sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)


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
    before = master.requests("/v1/jobs/heartbeat")
    assert await keeper.beat() == 0
    assert master.requests("/v1/jobs/heartbeat") == before + 2  # 3 leases, 2 per call
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


# ---------------------------------------------------------------------------- load shedding


class HeldRequest:
    """A real API request kept in flight on the master: its headers and part of its body are
    sent, the rest only when :meth:`finish` is called (it holds its turn meanwhile)."""

    def __init__(self, master) -> None:  # type: ignore[no-untyped-def]
        self.body = json.dumps({"name": "held", "slots": 1}).encode()
        self.sock = socket.create_connection(("127.0.0.1", master.port), timeout=60)
        self.sock.sendall(
            (f"POST /v1/workers HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             f"Authorization: Bearer {master.worker_token}\r\n"
             f"Content-Type: application/json\r\nContent-Length: {len(self.body)}\r\n\r\n"
             ).encode() + self.body[:5])

    def finish(self) -> int:
        """Send the rest of the body; the answer's status code."""
        self.sock.sendall(self.body[5:])
        head = b""
        while b"\r\n" not in head:
            chunk = self.sock.recv(4096)
            assert chunk, "the master closed the connection"
            head += chunk
        self.sock.close()
        return int(head.split(b" ", 2)[1])


def _in_flight(master, n: int = 1) -> None:  # type: ignore[no-untyped-def]
    wait_for(lambda: master.metric("coda_requests_in_flight") >= n,
             f"{n} request(s) in flight on the master")


SHED_AT_ONCE = {"CODA_SHED_MAX_IN_FLIGHT": "1", "CODA_SHED_QUEUE_WAIT_S": "0"}


def test_past_its_limit_the_master_sheds_with_retry_after(master_factory) -> None:
    m = master_factory(**SHED_AT_ONCE, CODA_SHED_RETRY_AFTER_S="7")
    held = HeldRequest(m)
    _in_flight(m)
    auth = {"Authorization": f"Bearer {m.worker_token}"}
    r = httpx.post(f"{m.url}/v1/workers", json={"name": "late", "slots": 1}, headers=auth,
                   timeout=30)
    assert r.status_code == 503 and r.headers["retry-after"] == "7"
    assert "overloaded" in r.json()["detail"]
    for path in ("/healthz", "/readyz", "/metrics"):  # never refused
        assert httpx.get(f"{m.url}{path}", timeout=30).status_code == 200
    assert m.metric("coda_requests_shed_total") == 1
    # a heartbeat keeps work already done: it is never refused
    r = httpx.post(f"{m.url}/v1/jobs/heartbeat", headers=auth, timeout=30, json={"leases": [
        {"job_id": str(uuid.uuid4()), "lease_token": "x" * 32}]})
    assert r.status_code == 200 and r.json()["leases"][0]["outcome"] == "lost"
    assert m.metric("coda_requests_shed_total") == 1
    assert held.finish() == 201  # the admitted request is served as usual
    _in_flight(m, 0)
    r = httpx.post(f"{m.url}/v1/workers", json={"name": "later", "slots": 1}, headers=auth,
                   timeout=30)
    assert r.status_code == 201


def test_a_request_past_the_limit_waits_for_a_turn_within_its_budget(master_factory) -> None:
    m = master_factory(CODA_SHED_MAX_IN_FLIGHT="1", CODA_SHED_QUEUE_WAIT_S="60")
    held = HeldRequest(m)
    _in_flight(m)
    answer: dict[str, int] = {}

    def late() -> None:
        answer["status"] = httpx.post(
            f"{m.url}/v1/workers", json={"name": "late", "slots": 1}, timeout=90,
            headers={"Authorization": f"Bearer {m.worker_token}"}).status_code

    t = threading.Thread(target=late)
    t.start()
    wait_for(lambda: m.metric("coda_requests_waiting") >= 1, "a request waiting for a turn")
    assert held.finish() == 201
    t.join(60)
    assert answer == {"status": 201} and m.metric("coda_requests_shed_total") == 0


async def test_the_worker_client_comes_back_after_retry_after(master_factory) -> None:
    m = master_factory(**SHED_AT_ONCE, CODA_SHED_RETRY_AFTER_S="1")
    held = HeldRequest(m)
    _in_flight(m)
    async with MasterClient(m.url, token=m.worker_token, retries=6) as client:
        call = asyncio.create_task(client.register_worker(WorkerRegister(name="w", slots=2)))

        async def shed() -> bool:
            return await asyncio.to_thread(m.metric, "coda_requests_shed_total") >= 1
        await wait_for_async(shed, "the worker's first call refused with 503")
        assert not call.done()  # it backs off as the master said, then comes back
        assert await asyncio.to_thread(held.finish) == 201
        registered = await call
    assert registered.name == "w"


async def test_a_long_poll_gives_its_turn_up_while_it_waits(master_factory) -> None:
    m = master_factory(CODA_SHED_MAX_IN_FLIGHT="1", CODA_SHED_QUEUE_WAIT_S="5")
    async with MasterClient(m.url, token=m.worker_token, retries=1) as wc, \
            MasterClient(m.url, token=m.admin_token, retries=1) as admin:
        worker = await wc.register_worker(WorkerRegister(name="w", slots=1))
        poll = asyncio.create_task(wc.lease(worker.id, wait_s=30))

        async def polling() -> bool:
            return await asyncio.to_thread(m.metric, "coda_lease_polls_waiting") >= 1
        await wait_for_async(polling, "a lease long-polling on the master")
        # the one turn is free while the lease waits: other calls are served, none refused
        await wc.register_worker(WorkerRegister(name="other", slots=1))
        await submit(admin, n_tasks=1)
        assert len(await poll) == 1
    assert m.metric("coda_requests_shed_total") == 0


def test_retry_after_is_honoured_with_bounded_jitter() -> None:
    waits = [after_hint(2.0) for _ in range(200)]
    assert all(2.0 <= w <= 2.0 * (1 + RETRY_AFTER_JITTER) for w in waits)
    assert len(set(waits)) > 1  # spread: refused clients do not all come back at once
    assert after_hint(10_000) == MAX_RETRY_AFTER_S
    # refused again and again: each wait doubles (bounded), fewer retries, not a storm
    assert all(8.0 <= after_hint(2.0, 3) <= 8.0 * (1 + RETRY_AFTER_JITTER) for _ in range(50))
    assert after_hint(2.0, 40) == MAX_RETRY_AFTER_S
