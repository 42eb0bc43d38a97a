"""Infrastructure faults cost no episode an attempt: ``coda worker`` as a real process, a real
master, the replay model services and real desktops, with faults injected from outside.

- The master goes away mid-episode (SIGKILL, back on the same port once the worker's calls have
  been refused a while): the worker keeps its episode, which ends solved on its first attempt.
- The provider cannot make desktops (a program of the local desktop is not installed): the
  worker leases nothing and says why (its status, the dashboard); installed, it resumes by
  itself. A desktop that must be started again while the program is gone gives its job back
  uncounted. Every episode runs with ``max_attempts`` 1: an attempt spent on the
  infrastructure would fail it for good.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.faults import Stopwatch, record
from tests.fixtures.master import MasterProcess
from tests.fixtures.proxy import proxy
from tests.fixtures.services import Store
from tests.fixtures.waiting import wait_for
from tests.worker.test_episodes import C02, assert_c02_solved, wait_episode, wait_steps

from .workerproc import Rest, WorkerProcess, running_worker, worker_env

pytestmark = pytest.mark.slow
FAULT_TIMEOUT = 120.0


@pytest.fixture
def lmaster(master_factory: Any, service_store: Store) -> MasterProcess:
    """A master whose artifact store the model services read, with the default lease TTL."""
    return master_factory(CODA_ARTIFACTS_URL=str(service_store.root),  # type: ignore[no-any-return]
                          CODA_MAX_UPLOAD_BYTES=str(16 * 1024 * 1024), CODA_LEASE_TTL_S="60")


def _events(worker: WorkerProcess, event: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in worker.full_log().splitlines()
            if line.startswith("{") and f'"{event}"' in line]


def _provider(rest: Rest) -> dict[str, Any] | None:
    """The provider state the only worker of the master last reported."""
    workers = rest.get("/v1/workers")
    return workers[0]["provider"] if workers else None


def test_a_master_away_mid_episode_costs_no_attempt(
        lmaster: MasterProcess, replay_services: tuple[str, str], desktop_host: None,
        tmp_path: Path) -> None:
    rest = Rest(lmaster)
    [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
    planner, executor = replay_services
    env = worker_env(lmaster, planner, executor, "http://127.0.0.1:9", kinds="episode")
    with proxy(("127.0.0.1", lmaster.port)) as front:
        env["CODA_WORKER_MASTER_URL"] = f"http://127.0.0.1:{front.port}"
        with running_worker(env, tmp_path / "worker.log") as worker:
            wait_steps(rest, episode_id, 2, worker)
            stored = len(rest.episode(episode_id)["steps"])
            watch = Stopwatch()
            lmaster.stop(kill=True)  # mid-episode: no answer to anything the worker sends
            refused = front.refused
            wait_for(lambda: front.refused >= refused + 10,
                     "ten calls of the worker refused while the master is away", FAULT_TIMEOUT,
                     logs=worker.log, gone=worker.exited)
            lmaster.start()
            outage = watch.s()
            watch.restart()
            wait_for(lambda: len(rest.episode(episode_id)["steps"]) > stored,
                     "a step stored after the master came back", FAULT_TIMEOUT,
                     logs=worker.log, gone=worker.exited)
            record("master_killed_mid_episode", outage_s=outage,
                   next_step_stored_after_return_s=watch.s(),
                   calls_refused=front.refused - refused)
            ep = wait_episode(rest, episode_id, worker)
            log = worker.full_log()
    assert_c02_solved(ep, attempt=1)
    assert rest.job(ep["job_id"])["attempts"] == 1
    assert '"job.crashed"' not in log and '"job.failed"' not in log, log[-3000:]
    record("master_killed_mid_episode", attempts=1, episodes_failed=0)


def test_a_provider_that_cannot_make_desktops_leases_nothing_and_resumes_by_itself(
        lmaster: MasterProcess, replay_services: tuple[str, str], desktop_host: None,
        tmp_path: Path) -> None:
    wm = tmp_path / "bin" / "coda-test-wm"  # the window manager: not installed yet
    wm.parent.mkdir()
    openbox = shutil.which("openbox")
    assert openbox is not None
    rest = Rest(lmaster)
    first = rest.submit([C02], judge="never", rollouts=2, max_attempts=1)["episode_ids"]
    planner, executor = replay_services
    env = worker_env(lmaster, planner, executor, "http://127.0.0.1:9", kinds="episode",
                     provider_options=json.dumps({"window_manager": [str(wm)]}),
                     provider_probe_max_s="2")
    watch = Stopwatch()
    with running_worker(env, tmp_path / "worker.log") as worker:
        state = wait_for(lambda: (p := _provider(rest)) and p["fault"] and p,
                         "the worker to report its provider down", FAULT_TIMEOUT,
                         logs=worker.log, gone=worker.exited)
        detected = watch.s()
        assert state["fault"] == "missing" and str(wm) in state["detail"], state
        assert all(rest.episode(e)["status"] == "queued" and rest.episode(e)["attempts"] == 0
                   for e in first)  # nothing leased meanwhile
        page = rest.http.get("/").text
        assert "waiting: missing" in page and str(wm) in page
        wm.symlink_to(openbox)  # installed: the worker resumes by itself
        watch.restart()
        wait_for(lambda: rest.episode(first[0])["status"] != "queued", "the first leased",
                 FAULT_TIMEOUT, logs=worker.log, gone=worker.exited)
        record("local_program_missing_at_start", reported_after_start_s=detected,
               leased_after_install_s=watch.s())
        for episode_id in first:
            assert_c02_solved(wait_episode(rest, episode_id, worker), attempt=1)
        assert _provider(rest) == {"ok": True, "fault": None, "detail": "", "since": None,
                                   "given_back": 0, "next_probe_s": None}

        # the desktop must start again (its X server killed) while the program is gone: the
        # job goes back uncounted, and the worker waits for the program again
        wm.unlink()
        for x in worker.processes("Xvfb"):
            x.kill()
        [later] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
        watch.restart()
        state = wait_for(lambda: (p := _provider(rest)) and p["given_back"] >= 1 and p,
                         "the job given back", FAULT_TIMEOUT, logs=worker.log,
                         gone=worker.exited)
        given_back = watch.s()
        assert state["fault"] == "missing" and not state["ok"], state
        ep = rest.episode(later)
        job = rest.job(ep["job_id"])
        assert ep["status"] == "queued" and job["attempts"] == 0, (ep, job)
        assert job["error"].startswith("released: provider_down: missing: not installed: ")
        wm.symlink_to(openbox)
        watch.restart()
        wait_for(lambda: rest.episode(later)["status"] != "queued", "leased again",
                 FAULT_TIMEOUT, logs=worker.log, gone=worker.exited)
        record("local_program_missing_at_reset", given_back_after_submit_s=given_back,
               leased_after_install_s=watch.s(), attempts=1, episodes_failed=0)
        assert_c02_solved(wait_episode(rest, later, worker), attempt=1)
        down = _events(worker, "worker.provider_down")
        ready = [e for e in _events(worker, "worker.provider_ready") if "down_s" in e]
    assert [e["fault"] for e in down] == ["missing", "missing"]
    assert len(ready) == 2 and all(e["down_s"] > 0 for e in ready), ready
