"""The issue's exact case: ``coda up --vllm`` with an episode running, the planner's vLLM
server killed (SIGKILL, as a crash). ``coda up`` restarts it on its port with backoff, the
master's status counts the restart, and the episode completes on a retry with nobody's help
(the tiny random model: completed, whatever its success). tests/coda_app/test_up_supervision.py
does the same with the replay planner service."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fixtures.codaup import CodaUp, running_coda_up
from tests.fixtures.waiting import exited, log_tails, wait_for
from tests.vllm.conftest import require_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
TASK = {"id": "vllm-supervised", "app": "xterm", "step_budget": 6,
        "instruction": "Open a terminal and list the files of the home folder."}
WAIT_S = 900.0


@pytest.fixture
def coda_up_vllm(fresh_database_url: str, fresh_redis_url: str, desktop_host: None,
                 tmp_path: Path) -> Iterator[CodaUp]:
    require_vllm()
    with running_coda_up(tmp_path / "coda", ["--vllm", "--slots", "1"], timeout=WAIT_S,
                         database_url=fresh_database_url, redis_url=fresh_redis_url) as up:
        yield up


def _planner_vllms(up: subprocess.Popen[bytes]) -> list[psutil.Process]:
    """The planner's vLLM server: the child of ``coda up`` writing to vllm-planner.log (none
    while ``coda up`` has noticed a crash and not yet started the next one)."""
    def writes_planner_log(p: psutil.Process) -> bool:
        try:
            return os.readlink(f"/proc/{p.pid}/fd/1").endswith("vllm-planner.log")
        except OSError:
            return False
    return [p for p in psutil.Process(up.pid).children() if writes_planner_log(p)]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_planner_vllm_killed_mid_episode_is_restarted_and_the_episode_completes(
        coda_up_vllm: CodaUp) -> None:
    up, logs = coda_up_vllm.proc, coda_up_vllm.logs
    http = coda_up_vllm.admin()

    def logs_now() -> str:
        return log_tails(logs.glob("*.log"), 3000)

    episode_id = coda_up_vllm.submit_one(http, "supervised-vllm", TASK)

    def episode() -> dict[str, Any]:
        return coda_up_vllm.episode(http, episode_id)

    wait_for(lambda: (e := episode())["status"] == "running" and e["steps"],
             "the episode running, a step done", WAIT_S, interval=0.5, logs=logs_now,
             gone=exited(up, "coda up"))
    [first] = _planner_vllms(up)
    engines = first.children(recursive=True)  # its engine core and workers
    first.send_signal(signal.SIGKILL)  # a crash: the server alone, its engines orphaned

    def restarts() -> dict[str, int]:
        return coda_up_vllm.restarts(http)

    wait_for(lambda: restarts().get("vllm-planner") == 1, "the planner's vLLM restarted",
             WAIT_S, interval=1.0, logs=logs_now, gone=exited(up, "coda up"))
    wait_for(lambda: [p for p in _planner_vllms(up) if p.pid != first.pid],
             "the planner's next vLLM server", WAIT_S, interval=0.5, logs=logs_now,
             gone=exited(up, "coda up"))
    # the killed server's engine processes (orphans once it died) went with it: stop_server
    # kills its process group; no model left in memory twice
    assert engines and not [p.pid for p in engines if _alive(p)], engines
    ep = wait_for(lambda: (e := episode())["status"] in ("completed", "failed") and e,
                  "the episode finished", WAIT_S, interval=1.0, logs=logs_now,
                  gone=exited(up, "coda up"))
    assert ep["status"] == "completed", (ep, logs_now())
    counted = restarts()
    assert counted["vllm-planner"] == 1 and counted.get("worker") == 0, counted
    assert all(n == 0 for name, n in counted.items() if name != "vllm-planner"), counted
    up_log = (logs / "up.log").read_text()
    assert "stack.child_died" in up_log and "stack.child_restarted" in up_log
