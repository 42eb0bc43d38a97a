"""``coda worker`` end to end: real master, real model services, real Xvfb desktops with real
applications, the worker as a real process.

- the tiny random models: their garbage output becomes recorded step errors and the episode
  still ends cleanly; a judge job returns a verdict;
- the replay backend (recorded planner and executor outputs at the backend seam, everything
  else real) solves the bundled ScienceBoard TeXstudio task C-02: the task's own checkers pass;
  a group job samples G plans at a step and scores them;
- faults: a worker killed with SIGKILL mid-episode (another worker finishes it after the lease
  expires, once, without duplicate steps), a desktop killed mid-episode (the attempt fails with
  its reason, is requeued, the slot recovers), the planner service killed mid-episode (the
  slot waits for it without keeping the given-back job's lease), SIGTERM (running episodes
  drain).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coda.logging import get_logger
from coda_app.services import ServiceProcess, running_services
from tests.fixtures.master import EXAMPLES, REPLAYS, MasterProcess
from tests.fixtures.services import RunningService, Store, planner_settings, running_replays
from tests.fixtures.waiting import wait_for
from worker.providers.image import grassdata

from .workerproc import Rest, WorkerProcess, running_worker, worker_env

pytestmark = pytest.mark.slow
log = get_logger(__name__)

C02 = json.loads((EXAMPLES / "VM" / "TeXstudio" / "C-02.json").read_text())
C02_ACTIONS = ["hotkey", "type", "press", "type", "hotkey", "done"]
KALGEBRA_C01 = json.loads((EXAMPLES / "VM" / "KAlgebra" / "C-01.json").read_text())
GRASS_A03 = json.loads((EXAMPLES / "VM" / "GrassGIS" / "A-03.json").read_text())
EPISODE_TIMEOUT = 240.0


def _steps_by_attempt(episode: dict[str, Any]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for s in episode["steps"]:
        out.setdefault(s["attempt"], []).append(s)
    return out


def _wait_episode(rest: Rest, episode_id: str, worker: WorkerProcess | None,
                  status: str = "completed", timeout: float = EPISODE_TIMEOUT) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        ep = rest.episode(episode_id)
        if ep["status"] == "failed" and status != "failed":
            raise AssertionError(f"episode failed: {ep['error']}"
                                 + (f"\nworker log:\n{worker.log()}" if worker else ""))
        return ep if ep["status"] == status else None

    return wait_for(probe, f"episode {episode_id} {status}", timeout,
                    logs=worker.log if worker else lambda: "",
                    gone=worker.exited if worker else None)


def _wait_steps(rest: Rest, episode_id: str, n: int, worker: WorkerProcess) -> None:
    wait_for(lambda: len(rest.episode(episode_id)["steps"] or []) >= n,
             f"{n} steps of {episode_id}", EPISODE_TIMEOUT, logs=worker.log, gone=worker.exited)


def _assert_c02_solved(ep: dict[str, Any], attempt: int) -> None:
    summary = [(s["attempt"], s["index"], (s["action"] or {}).get("type"), s["outcome"],
                s["error"]) for s in ep["steps"]]
    assert ep["status"] == "completed" and ep["success"] is True, (ep["status"], summary)
    steps = _steps_by_attempt(ep)[attempt]
    assert [s["index"] for s in steps] == list(range(len(C02_ACTIONS)))
    assert [s["action"]["type"] for s in steps] == C02_ACTIONS
    assert all(s["outcome"] == "ok" and s["screenshot"] for s in steps)


# for the other episode tests (tests/worker/test_*faults*.py)
wait_episode, wait_steps, assert_c02_solved = _wait_episode, _wait_steps, _assert_c02_solved

def replays_fixture(name: str, require: Callable[[], object]) -> Any:
    """A module fixture: planner and executor services answering from
    ``examples/replays/<name>.*.json`` (their URLs), once ``require`` (a build's check, which
    skips without it) passes."""
    @pytest.fixture(scope="module")
    def replays(service_store: Store, tmp_path_factory: pytest.TempPathFactory,
                ) -> Iterator[tuple[str, str]]:
        require()
        with running_replays(REPLAYS / name, service_store,
                             tmp_path_factory.mktemp(f"{name}-replays")) as urls:
            yield urls
    return replays


NO_JUDGE = "http://127.0.0.1:9"  # judge="never": the worker never calls it


def solve_replayed(wmaster: MasterProcess, replays: tuple[str, str], task: dict[str, Any],
                   log_path: Path, actions: list[str], **worker: Any) -> dict[str, Any]:
    """``task`` submitted (judge="never") and run by a worker on the replay services; its
    episode, solved by the task's own checker, its steps ``actions`` (their types), each ok
    with a screenshot."""
    rest = Rest(wmaster)
    [episode_id] = rest.submit([task], judge="never")["episode_ids"]
    env = worker_env(wmaster, *replays, NO_JUDGE, kinds="episode", **worker)
    with running_worker(env, log_path) as proc:
        ep = _wait_episode(rest, episode_id, proc)
    summary = [(s["index"], s["action"], s["outcome"], s["error"]) for s in ep["steps"]]
    assert ep["success"] is True, (summary, ep)
    assert [s["action"]["type"] for s in ep["steps"]] == actions, summary
    assert all(s["outcome"] == "ok" and s["screenshot"] for s in ep["steps"]), summary
    return ep


# ---------------------------------------------------------------------------- tiny models


def test_tiny_models_garbage_output_is_recorded_as_step_errors(
        wmaster: MasterProcess, planner_service: RunningService,
        executor_service: RunningService, judge_service: RunningService, desktop_host: None,
        tmp_path: Path) -> None:
    rest = Rest(wmaster)
    task = {"id": "tiny-terminal", "app": "xterm", "step_budget": 3,
            "instruction": "Open a terminal and list the files of the home folder."}
    created = rest.submit([task], judge="always")
    episode_id = created["episode_ids"][0]
    env = worker_env(wmaster, planner_service.url, executor_service.url, judge_service.url)
    with running_worker(env, tmp_path / "worker.log") as worker:
        ep = _wait_episode(rest, episode_id, worker)
        steps = ep["steps"]
        assert len(steps) == 3 and ep["success"] is None  # no checker: the judge decides
        assert [s["index"] for s in steps] == [0, 1, 2]
        for s in steps:
            assert s["screenshot"] and s["planner_version"] is None
            assert s["timings"]["total"] > 0 and s["screen"]["width"] > 0
            if s["outcome"] != "ok":
                assert s["error"], s
        assert any(s["outcome"] in ("parse_error", "model_error") for s in steps), steps
        png = rest.http.get(f"/v1/artifacts/{steps[0]['screenshot']}")
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
        # the completed episode got a judge job (batch option "always"); its verdict is stored
        judged = wait_for(lambda: rest.episode(episode_id)["verdict"], "the verdict", 180,
                          logs=worker.log, gone=worker.exited)
        assert isinstance(judged["correct"], bool) and judged["votes"]


def _c02_episode(wmaster: MasterProcess, replay_services: tuple[str, str],
                 judge_service: RunningService, **worker: Any,
                 ) -> tuple[Rest, str, dict[str, str]]:
    """TeXstudio C-02 submitted (no judge job), and a worker environment on the replay
    services."""
    rest = Rest(wmaster)
    episode_id = rest.submit([C02], judge="never")["episode_ids"][0]
    planner_url, executor_url = replay_services
    return rest, episode_id, worker_env(wmaster, planner_url, executor_url, judge_service.url,
                                        **worker)


# ---------------------------------------------------------------------------- replay backend


def _group_job(rest: Rest, episode_id: str, worker: WorkerProcess) -> None:
    """A group job on the episode's first step (8 plans sampled and scored), done."""
    job = rest.post("/v1/jobs", {"kind": "group", "payload": {
        "episode_id": episode_id, "attempt": 1, "step_index": 0, "group_size": 8}})
    wait_for(lambda: rest.job(job["id"])["status"] == "succeeded", "the group job", 120,
             logs=worker.log, gone=worker.exited)


def _assert_right_and_wrong_plans(rest: Rest) -> None:
    """The one group leased scores the recorded right plan 1 and the wrong one less."""
    [item] = rest.http.post("/v1/groups/lease", json={"max_groups": 10}).json()["items"]
    rewards = sorted(c["reward"] for c in item["group"]["candidates"])
    assert rewards[-4:] == [1.0] * 4 and rewards[0] < 1.0


def test_replay_solves_the_texstudio_task_and_a_group_job_scores_plans(
        wmaster: MasterProcess, replay_services: tuple[str, str],
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    rest, episode_id, env = _c02_episode(wmaster, replay_services, judge_service)
    # an hour's window: each step report goes only because the slot waits for it (its next
    # step, the episode's end), so the episode ends only if every such wait sends at once
    env["CODA_WORKER_STEP_REPORT_WINDOW_S"] = "3600"
    with running_worker(env, tmp_path / "worker.log") as worker:
        ep = _wait_episode(rest, episode_id, worker)
        _assert_c02_solved(ep, attempt=1)
        assert wmaster.requests("/v1/jobs/steps") >= 1
        assert wmaster.requests("/v1/jobs/{job_id}/steps") == 0
        (tmp_path / "episode.json").write_text(json.dumps(ep, indent=1))
        _group_job(rest, episode_id, worker)
    groups = rest.http.post("/v1/groups/lease", json={"max_groups": 10}).json()["items"]
    assert len(groups) == 1
    group = groups[0]["group"]
    assert group["state"]["episode_id"] == episode_id and group["state"]["step_index"] == 0
    assert group["target"]["type"] == "hotkey"
    rewards = Counter(c["reward"] for c in group["candidates"])
    assert rewards == {1.0: 4, 0.0: 4}  # the recorded right plan and the wrong one, alternating
    assert all(c["plan"].startswith("Thought:") for c in group["candidates"])


def _solved_with_plans_scored(wmaster: MasterProcess, replay_services: tuple[str, str],
                              judge_service: RunningService, task: dict[str, Any],
                              log_path: Path) -> tuple[str, list[dict[str, Any]]]:
    """``task`` solved by a worker on the replay services (its own checker passes), then a
    group job on its first step scoring the recorded right plan and the wrong one; the
    episode's id and steps."""
    rest = Rest(wmaster)
    episode_id = rest.submit([task], judge="never")["episode_ids"][0]
    planner_url, executor_url = replay_services
    env = worker_env(wmaster, planner_url, executor_url, judge_service.url)
    with running_worker(env, log_path) as worker:
        ep = _wait_episode(rest, episode_id, worker)
        summary = [(s["index"], s["action"], s["outcome"], s["error"]) for s in ep["steps"]]
        assert ep["success"] is True, (summary, ep)
        _group_job(rest, episode_id, worker)
    _assert_right_and_wrong_plans(rest)
    return episode_id, ep["steps"]


def test_replay_solves_a_kalgebra_task_checked_on_the_real_kalgebra(
        wmaster: MasterProcess, replay_services: tuple[str, str],
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    """KAlgebra C-01 (log_2(3) into p): the recorded plan types the assignment into the real
    KAlgebra's console; the task's own checker reads p from KAlgebra's Variables panel."""
    _, steps = _solved_with_plans_scored(wmaster, replay_services, judge_service,
                                         KALGEBRA_C01, tmp_path / "worker.log")
    assert [s["action"]["type"] for s in steps] == ["type", "done"], steps


def test_replay_solves_a_grass_task_checked_on_the_real_grass(
        wmaster: MasterProcess, replay_services: tuple[str, str],
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    """GRASS GIS A-03 (hide Map Display 1's toolbar): the worker sets the task up on Debian's
    GRASS (stand-in data sets, the GUI with the project's state reader), the recorded plan
    right-clicks the map window and clicks Hide toolbars in its context menu, and the task's
    own checker reads the GUI's toolbars through the guest agent."""
    if not grassdata.is_built(grassdata.default_dest()):
        pytest.fail("GRASS GIS's stand-in data sets are not built: run scripts/desktop-deps.sh")
    episode_id, steps = _solved_with_plans_scored(wmaster, replay_services, judge_service,
                                                  GRASS_A03, tmp_path / "worker.log")
    actions = [s["action"] for s in steps]
    assert [a["type"] for a in actions] == ["right_click", "click", "done"], steps
    assert (actions[0]["x"], actions[0]["y"], actions[1]["x"], actions[1]["y"]) == (
        867, 314, 945, 356)  # the map window's middle, then Hide toolbars in its menu
    log.info("replay.grass", episode_id=episode_id)


# ---------------------------------------------------------------------------- faults


def test_worker_killed_mid_episode_another_worker_finishes_it_once(
        wmaster: MasterProcess, replay_services: tuple[str, str],
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    rest, episode_id, env = _c02_episode(wmaster, replay_services, judge_service)
    first = WorkerProcess(env=env, log_path=tmp_path / "worker-a.log")
    first.start()
    try:
        _wait_steps(rest, episode_id, 2, first)
    finally:
        first.kill()
    with running_worker(env, tmp_path / "worker-b.log") as second:
        ep = _wait_episode(rest, episode_id, second)
    job = rest.job(ep["job_id"])
    assert job["status"] == "succeeded" and job["attempts"] == 2
    by_attempt = _steps_by_attempt(ep)
    assert set(by_attempt) == {1, 2} and len(by_attempt[1]) >= 2
    for steps in by_attempt.values():  # one row per (attempt, index)
        assert len({s["index"] for s in steps}) == len(steps)
    _assert_c02_solved(ep, attempt=2)
    assert "job.completed" in second.full_log() and "job.completed" not in first.full_log()


def test_desktop_killed_mid_episode_fails_the_attempt_and_the_slot_recovers(
        wmaster: MasterProcess, replay_services: tuple[str, str],
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    rest, episode_id, env = _c02_episode(wmaster, replay_services, judge_service)
    with running_worker(env, tmp_path / "worker.log") as worker:
        _wait_steps(rest, episode_id, 1, worker)
        xvfb = wait_for(lambda: worker.processes("Xvfb"), "the slot's Xvfb", 30,
                        logs=worker.log, gone=worker.exited)
        for p in xvfb:
            p.kill()
        ep = _wait_episode(rest, episode_id, worker)
        log = worker.full_log()
    assert rest.job(ep["job_id"])["attempts"] == 2
    failed = [json.loads(line) for line in log.splitlines()
              if line.startswith("{") and '"job.failed"' in line]
    assert failed and failed[0]["retry"] is True, log
    assert failed[0]["error"].split(":")[0] in ("x_crashed", "agent_gone", "not_answering",
                                                "blank_screen", "guest_error"), failed
    _assert_c02_solved(ep, attempt=2)


def test_planner_killed_mid_episode_the_slot_waits_without_keeping_the_lease(
        wmaster: MasterProcess, replay_services: tuple[str, str], service_store: Store,
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    """The planner service dies (SIGKILL) mid-episode: the attempt fails
    (``service_unreachable``, retryable), the job goes back to the queue, and the slot waits
    for the planner's ``/readyz`` with no lease kept meanwhile (a lease kept for a job already
    given back was heartbeated as lost twice a second, flooding the log, until the planner was
    back). With the planner restarted on its port, the next attempt solves the task."""
    planner = ServiceProcess.of("planner", planner_settings(
        REPLAYS / "demo.planner.json", service_store, tmp_path, backend="replay"),
        tmp_path / "planner.log")
    rest = Rest(wmaster)
    episode_id = rest.submit([C02], judge="never")["episode_ids"][0]
    env = worker_env(wmaster, planner.url, replay_services[1], judge_service.url)
    with running_services(planner), running_worker(env, tmp_path / "worker.log") as worker:
        _wait_steps(rest, episode_id, 1, worker)
        assert planner.proc is not None
        planner.proc.kill()
        planner.proc.wait(30)
        wait_for(lambda: '"worker.service_waiting"' in worker.full_log(), "the slot waiting", 120,
                 logs=worker.log, gone=worker.exited)
        beats = wmaster.requests("/v1/workers/{worker_id}/heartbeat")
        leases = wmaster.requests("/v1/jobs/heartbeat")
        wait_for(lambda: wmaster.requests("/v1/workers/{worker_id}/heartbeat") >= beats + 3,
                 "three worker heartbeats while the slot waits", 60, logs=worker.log,
                 gone=worker.exited)
        assert wmaster.requests("/v1/jobs/heartbeat") == leases  # no lease held, no beat
        assert rest.job(rest.episode(episode_id)["job_id"])["status"] == "queued"
        planner.restart()
        ep = _wait_episode(rest, episode_id, worker)
        log = worker.full_log()
    assert '"job.lease_lost_on_heartbeat"' not in log and '"worker.service_ready"' in log
    failed = [json.loads(line) for line in log.splitlines()
              if line.startswith("{") and '"job.failed"' in line]
    assert [(f["retry"], f["error"].split(":")[0]) for f in failed] == [
        (True, "service_unreachable")], failed
    assert rest.job(ep["job_id"])["attempts"] == 2
    _assert_c02_solved(ep, attempt=2)


def test_sigterm_lets_the_running_episode_finish(
        wmaster: MasterProcess, replay_services: tuple[str, str],
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    rest, episode_id, env = _c02_episode(wmaster, replay_services, judge_service)
    worker = WorkerProcess(env=env, log_path=tmp_path / "worker.log")
    worker.start()
    try:
        _wait_steps(rest, episode_id, 1, worker)
        assert worker.terminate(timeout=EPISODE_TIMEOUT) == 0, worker.log()
    finally:
        worker.stop()
    ep = rest.episode(episode_id)
    _assert_c02_solved(ep, attempt=1)
    assert '"cut_short": 0' in worker.full_log()


def test_sigterm_past_the_grace_period_gives_the_episode_back(
        wmaster: MasterProcess, replay_services: tuple[str, str],
        judge_service: RunningService, desktop_host: None, tmp_path: Path) -> None:
    rest, episode_id, env = _c02_episode(wmaster, replay_services, judge_service, drain_grace_s=0.2)
    worker = WorkerProcess(env=env, log_path=tmp_path / "worker.log")
    worker.start()
    try:
        _wait_steps(rest, episode_id, 1, worker)
        assert worker.terminate(timeout=60) == 0, worker.log()
    finally:
        worker.stop()
    ep = rest.episode(episode_id)
    job = rest.job(ep["job_id"])
    assert job["status"] == "queued" and "worker_stopping" in (job["error"] or ""), job
    assert ep["status"] == "queued"
    with running_worker(env, tmp_path / "worker-2.log") as again:  # requeued: it runs again
        _assert_c02_solved(_wait_episode(rest, episode_id, again), attempt=2)
