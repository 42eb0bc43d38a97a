"""Run ``coda worker`` as a real process against a test master and model services, and read
the master over REST while it works."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from coda.procs import stop_process
from tests.fixtures.master import ROOT, MasterProcess
from tests.fixtures.services import TOKENS
from tests.fixtures.waiting import exited


@dataclass
class WorkerProcess:
    """One ``python -m worker.cli`` process; ``env`` are its CODA_WORKER_* settings."""

    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept for the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "worker.cli"], cwd=ROOT, env={**os.environ, **self.env},
            stdout=log, stderr=subprocess.STDOUT)

    def _tree(self) -> list[psutil.Process]:
        assert self.proc is not None
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def kill(self) -> None:
        """SIGKILL, as a crash: the worker gets no chance to report anything. Its desktops
        (own sessions) are killed after it, as a crashed host would lose them."""
        assert self.proc is not None
        tree = self._tree()
        self.proc.kill()
        self.proc.wait(10)
        for p in tree:
            with suppress(psutil.NoSuchProcess):
                p.kill()

    def terminate(self, timeout: float = 120.0) -> int:
        """SIGTERM and wait for the drain; the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        tree = self._tree()
        stop_process(self.proc, timeout=30, sig=signal.SIGINT)
        for p in tree:
            with suppress(psutil.NoSuchProcess):
                p.kill()

    def log(self) -> str:
        """Its log's last 6,000 characters (for a failure's message)."""
        return self.full_log()[-6000:]

    def full_log(self) -> str:
        """All of its log (for assertions on what it logged)."""
        return self.log_path.read_text(errors="replace")

    def exited(self) -> str | None:
        """Why a wait on its work ends early (``gone`` of :func:`wait_for`): it exited."""
        return exited(self.proc, "the worker")()

    def processes(self, name: str) -> list[psutil.Process]:
        return [p for p in self._tree() if p.name() == name]


def worker_env(master: MasterProcess, planner: str, executor: str, judge: str,
               **extra: Any) -> dict[str, str]:
    env = {
        "CODA_WORKER_MASTER_URL": master.url,
        "CODA_WORKER_TOKEN": master.worker_token,
        "CODA_WORKER_PLANNER_URL": planner,
        "CODA_WORKER_EXECUTOR_URL": executor,
        "CODA_WORKER_JUDGE_URL": judge,
        "CODA_WORKER_SERVICE_TOKEN": TOKENS.inference,
        "CODA_WORKER_HEARTBEAT_INTERVAL_S": "0.5",
        "CODA_WORKER_LEASE_WAIT_S": "1",
        "CODA_WORKER_MAX_TOKENS": "32",
        "CODA_WORKER_EXECUTOR_MAX_TOKENS": "32",
        "CODA_WORKER_JUDGE_POLICY": '{"votes": 1, "max_frames": 4}',
        "CODA_LOG_FORMAT": "json",
    }
    env.update({f"CODA_WORKER_{k.upper()}": str(v) for k, v in extra.items()})
    return env


@contextmanager
def running_worker(env: dict[str, str], log_path: Path) -> Iterator[WorkerProcess]:
    w = WorkerProcess(env=env, log_path=log_path)
    w.start()
    try:
        yield w
    finally:
        w.stop()


class Rest:
    """The master over REST with the admin token."""

    def __init__(self, master: MasterProcess) -> None:
        self.http = httpx.Client(base_url=master.url, timeout=30, headers={
            "authorization": f"Bearer {master.admin_token}"})

    def get(self, path: str, **params: Any) -> Any:
        resp = self.http.get(path, params=params)
        resp.raise_for_status()
        return resp.json()

    def post(self, path: str, body: Any) -> Any:
        resp = self.http.post(path, json=body)
        assert resp.status_code < 300, resp.text
        return resp.json()

    def submit(self, tasks: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
        return self.post("/v1/batches", {"tasks": tasks, **options})  # type: ignore[no-any-return]

    def episode(self, episode_id: str) -> dict[str, Any]:
        return self.get(f"/v1/episodes/{episode_id}", steps="true")  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.get(f"/v1/jobs/{job_id}")  # type: ignore[no-any-return]

