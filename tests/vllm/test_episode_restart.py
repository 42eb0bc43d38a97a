"""vLLM killed (kill -9) and restarted under a running episode: the planner service retries,
then answers a typed, retryable failure (502); the worker fails the attempt
(``service_unavailable``, no step recorded for it), the master requeues it, and the slot waits
for the planner's ``/readyz`` (which asks vLLM) before its next job; once vLLM is back the
episode ends after a retry. Nothing is half-recorded:
every stored step either carries its plan or a typed step error of the model's output, never
a planner/executor error caused by the server being down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coda_app.services import ServiceProcess, running_services
from tests.fixtures.master import MasterProcess
from tests.fixtures.services import TOKENS, Store
from tests.fixtures.waiting import wait_for
from tests.vllm.conftest import SERVED_NAME, VllmServer
from tests.worker.workerproc import Rest, running_worker, worker_env

pytestmark = pytest.mark.vllm
TASK = {"id": "vllm-restart", "app": "xterm", "step_budget": 8,
        "instruction": "Open a terminal and list the files of the home folder."}
WAIT_S = 600.0


@pytest.fixture
def services(vllm_server: VllmServer, service_store: Store, tmp_path: Path,
             ) -> Iterator[dict[str, str]]:
    """The planner, executor and judge services as processes, all three on the vLLM server."""
    from executor_service.settings import ExecutorSettings
    from judge_service.settings import JudgeModelSpec, JudgeSettings
    from planner_service.settings import PlannerSettings

    backend: dict[str, Any] = {"backend": "openai", "base_url": f"{vllm_server.url}/v1",
                               "model": SERVED_NAME, "backend_retries": 1,
                               "backend_timeout_s": 60}
    common: dict[str, Any] = {"artifacts_url": str(service_store.root), **TOKENS.env()}
    procs = [
        ServiceProcess.of("planner", PlannerSettings(
            **backend, **common, adapter_cache_dir=str(tmp_path / "adapters")),
            tmp_path / "planner.log"),
        ServiceProcess.of("executor", ExecutorSettings(**backend, **common),
                          tmp_path / "executor.log"),
        ServiceProcess.of("judge", JudgeSettings(
            models=[JudgeModelSpec(name="tiny", **backend)], max_tokens=8, **common),
            tmp_path / "judge.log"),
    ]
    with running_services(*procs):
        yield {p.role: p.url for p in procs}


def test_vllm_killed_under_a_running_episode(
        vllm_server: VllmServer, services: dict[str, str], master_factory: Any,
        service_store: Store, desktop_host: None, tmp_path: Path) -> None:
    master: MasterProcess = master_factory(CODA_ARTIFACTS_URL=str(service_store.root),
                                           CODA_MAX_UPLOAD_BYTES=str(16 * 1024 * 1024))
    rest = Rest(master)
    created = rest.submit([TASK], judge="never")  # the default 3 attempts
    episode_id = created["episode_ids"][0]
    env = worker_env(master, services["planner"], services["executor"], services["judge"],
                     max_steps=8)
    with running_worker(env, tmp_path / "worker.log") as worker:
        wait_for(lambda: len(rest.episode(episode_id)["steps"] or []) >= 1,
                 "a first step", WAIT_S, logs=worker.log, gone=worker.exited)
        vllm_server.kill()
        try:
            wait_for(lambda: '"service_unavailable' in worker.full_log()
                     or '"service_unreachable' in worker.full_log(),
                     "the attempt failed for the model server", WAIT_S, logs=worker.log,
                     gone=worker.exited)
        finally:
            vllm_server.start()
        ep = wait_for(lambda: (e := rest.episode(episode_id))["status"]
                      in ("completed", "failed") and e, "the episode's end", WAIT_S,
                      logs=worker.log, gone=worker.exited)
        log = worker.full_log()
    failed = [json.loads(line) for line in log.splitlines()
              if line.startswith("{") and '"job.failed"' in line]
    assert failed and failed[0]["retry"] is True, log
    assert failed[0]["error"].split(":")[0] in ("service_unavailable", "service_unreachable")
    # the slot waited for the planner's /readyz (vLLM back) before the next attempt, so the
    # requeued attempts were not spent while vLLM was down: the episode ends after a retry
    assert '"worker.service_ready"' in log, log
    assert ep["status"] == "completed", ep
    assert 2 <= rest.job(ep["job_id"])["attempts"] <= 3
    for s in ep["steps"]:
        assert s["plan"] is not None or (s["outcome"] != "ok" and s["error"]), s
        assert not (s["error"] or "").startswith(("planner: 5", "executor: 5")), s
    by_attempt: dict[int, list[int]] = {}
    for s in ep["steps"]:
        by_attempt.setdefault(s["attempt"], []).append(s["index"])
    for indexes in by_attempt.values():  # one row per (attempt, index), none missing
        assert sorted(indexes) == list(range(len(indexes)))
