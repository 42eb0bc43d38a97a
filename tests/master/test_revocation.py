"""Revoking a worker token at a running master (``/v1/admin/worker-tokens``): its next
requests are refused with a 401 that says so, the leases of its workers go back to the queue
at once and another worker leases them; other tokens and their workers are untouched; every
master process refuses it."""

from __future__ import annotations

import secrets

import httpx
import pytest

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.jobs import EpisodeResult
from coda.contracts.master_api import WorkerRegister
from coda.contracts.records import EpisodeStatus
from master.tokens import fingerprint
from tests.fixtures.master import TEST_CLOCK
from tests.fixtures.waiting import wait_for, wait_for_async
from tests.master.conftest import submit

GOOD = "worker-good-" + secrets.token_hex(12)
BAD = "worker-bad-" + secrets.token_hex(12)


@pytest.fixture
def two_token_master(master_factory):  # type: ignore[no-untyped-def]
    return master_factory(CODA_WORKER_TOKENS=f"{GOOD},{BAD}", **TEST_CLOCK)


async def test_revoked_token_is_refused_and_its_leases_go_to_another_worker(two_token_master):
    m = two_token_master
    async with MasterClient(m.url, token=m.admin_token, retries=1) as admin, \
            MasterClient(m.url, token=GOOD, retries=1) as good, \
            MasterClient(m.url, token=BAD, retries=1) as bad:
        listed = {t.fingerprint: t for t in await admin.worker_tokens()}
        assert set(listed) == {fingerprint(GOOD), fingerprint(BAD)}
        assert all(t.revoked_at is None for t in listed.values())
        bad_worker = await bad.register_worker(WorkerRegister(name="bad-server", slots=4))
        good_worker = await good.register_worker(WorkerRegister(name="good-server", slots=4))
        await submit(admin, n_tasks=3, max_attempts=3)
        bad_jobs = await bad.lease(bad_worker.id, capacity=2)
        [good_job] = await good.lease(good_worker.id, capacity=1)
        assert len(bad_jobs) == 2

        revoked = await admin.revoke_worker_token(fingerprint(BAD))
        assert revoked.workers == [bad_worker.id] and revoked.leases_returned == 2
        assert revoked.revoked_at is not None

        # the revoked server's next requests: 401 naming the revocation, never the token
        for call in (bad.lease(bad_worker.id), bad.heartbeat(bad_jobs[0]),
                     bad.worker_heartbeat(bad_worker.id),
                     bad.complete(bad_jobs[0], EpisodeResult(success=True))):
            with pytest.raises(ServiceError) as err:
                await call
            assert err.value.status == 401
            assert "revoked" in str(err.value.detail) and BAD not in str(err.value.detail)
            assert fingerprint(BAD) in str(err.value.detail)

        # its two episodes are back in the queue (attempt 1 counted) and the other worker
        # leases them at once, without any lease expiring
        for job in bad_jobs:
            ep = await admin.get_episode(job.payload.episode_id)
            assert ep.status is EpisodeStatus.QUEUED and ep.error == "worker token revoked"
        again = await good.lease(good_worker.id, capacity=5, wait_s=10)
        assert {j.id for j in again} == {j.id for j in bad_jobs}
        assert all(j.attempt == 2 for j in again)

        # the other worker's lease is untouched: its heartbeat and completion go through
        await good.heartbeat(good_job)
        await good.complete(good_job, EpisodeResult(success=True))
        for job in again:
            await good.complete(job, EpisodeResult(success=False))
        listed = {t.fingerprint: t for t in await admin.worker_tokens()}
        assert listed[fingerprint(BAD)].revoked_at is not None
        assert listed[fingerprint(GOOD)].revoked_at is None
        assert listed[fingerprint(GOOD)].workers == [good_worker.id]
        # revoking twice is no error; a fingerprint the master does not know is a 404
        assert (await admin.revoke_worker_token(fingerprint(BAD))).leases_returned == 0
        with pytest.raises(ServiceError) as err:
            await admin.revoke_worker_token("0" * 16)
        assert err.value.status == 404
        # only the admin revokes
        with pytest.raises(ServiceError) as err:
            await good.revoke_worker_token(fingerprint(GOOD))
        assert err.value.status == 403


async def test_a_long_poll_open_at_the_revocation_gets_nothing(two_token_master):
    """A worker of the revoked token long-polling when it is revoked: a job that arrives
    during the poll is not kept by it (it goes back at once and the other worker gets it)."""
    import asyncio

    m = two_token_master
    async with MasterClient(m.url, token=m.admin_token, retries=1) as admin, \
            MasterClient(m.url, token=GOOD, retries=1) as good, \
            MasterClient(m.url, token=BAD, retries=1) as bad:
        bad_worker = await bad.register_worker(WorkerRegister(name="bad-server"))
        good_worker = await good.register_worker(WorkerRegister(name="good-server"))
        poll = asyncio.create_task(bad.lease(bad_worker.id, wait_s=30))

        async def polling() -> bool:
            return await asyncio.to_thread(m.metric, "coda_lease_polls_waiting") >= 1
        await wait_for_async(polling, "the revoked worker long-polling")
        await admin.revoke_worker_token(fingerprint(BAD))
        created = await submit(admin, n_tasks=1)
        assert await poll == []
        [job] = await good.lease(good_worker.id, wait_s=10)
        assert job.payload.episode_id == created.episode_ids[0]


def test_every_master_process_refuses_a_revoked_token(master_factory):
    first = master_factory(CODA_WORKER_TOKENS=f"{GOOD},{BAD}")
    second = master_factory(CODA_WORKER_TOKENS=f"{GOOD},{BAD}")

    def status_of(m, token: str) -> int:  # type: ignore[no-untyped-def]
        return httpx.get(f"{m.url}/v1/workers", timeout=10,
                         headers={"Authorization": f"Bearer {token}"}).status_code

    assert status_of(second, BAD) == 200
    r = httpx.delete(f"{first.url}/v1/admin/worker-tokens/{fingerprint(BAD)}", timeout=30,
                     headers={"Authorization": f"Bearer {first.admin_token}"})
    assert r.status_code == 200, r.text
    assert BAD not in r.text
    assert status_of(first, BAD) == 401
    # the other process reads the revocation on its next maintenance round
    wait_for(lambda: status_of(second, BAD) == 401,
             "the second master refusing the revoked token", 30)
    assert status_of(second, GOOD) == 200
    second.restart()  # a restart keeps it (it is in the database)
    assert status_of(second, BAD) == 401
    for m in (first, second):
        assert BAD not in (m.log_path.read_text() if m.log_path else "")


def test_a_worker_whose_token_is_revoked_stops_leasing_and_says_why(two_token_master,
                                                                     tmp_path):
    """The real ``coda worker``: after the revocation its next lease is refused; it logs
    ``worker.token_refused`` once and exits (code 3) instead of asking again and again."""
    from tests.worker.workerproc import WorkerProcess, worker_env

    m = two_token_master
    env = {**worker_env(m, "http://127.0.0.1:9", "http://127.0.0.1:9", "http://127.0.0.1:9"),
           "CODA_WORKER_TOKEN": BAD, "CODA_WORKER_KINDS": "judge",
           "CODA_WORKER_NAME": "revoked-server"}
    worker = WorkerProcess(env=env, log_path=tmp_path / "worker.log")
    admin = {"Authorization": f"Bearer {m.admin_token}"}
    worker.start()
    try:
        wait_for(lambda: any(w["name"] == "revoked-server" for w in httpx.get(
            f"{m.url}/v1/workers", headers=admin, timeout=10).json()),
            "the worker registered", 60, gone=worker.exited, logs=worker.log)
        r = httpx.delete(f"{m.url}/v1/admin/worker-tokens/{fingerprint(BAD)}", headers=admin,
                         timeout=30)
        assert r.status_code == 200, r.text
        assert worker.proc is not None
        assert worker.proc.wait(60) == 3, worker.log()
    finally:
        worker.stop()
    log = worker.full_log()
    assert log.count("worker.token_refused") == 1 and "revoked" in log, log
    assert BAD not in log
    # started again with the revoked token (compose restarts it): refused at registration,
    # the same clear exit
    worker.start()
    try:
        assert worker.proc is not None and worker.proc.wait(60) == 3, worker.log()
    finally:
        worker.stop()
    assert worker.full_log().count("worker.token_refused") == 2


def test_coda_admin_lists_and_revokes_by_token_file(two_token_master, tmp_path):
    import json
    import subprocess
    import sys

    from tests.fixtures.master import ROOT

    m = two_token_master
    secret = tmp_path / "bad-token"
    secret.write_text(BAD + "\n")

    def coda(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "coda_app.cli", "admin", *args,
                               "--url", m.url, "--token", m.admin_token], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=False)

    out = coda("revoke-worker-token", "--token-file", str(secret))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["fingerprint"] == fingerprint(BAD)
    listed = coda("worker-tokens")
    assert listed.returncode == 0 and fingerprint(GOOD) in listed.stdout
    assert BAD not in listed.stdout + out.stdout
    assert httpx.get(f"{m.url}/v1/workers", headers={"Authorization": f"Bearer {BAD}"},
                     timeout=10).status_code == 401
