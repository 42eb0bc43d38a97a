"""A model service as a real process (uvicorn on a free port), for tests and benchmarks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
from pydantic_settings import BaseSettings

from coda.modelservice.settings import settings_env
from coda.procs import free_port, stop_process

APPS = {"planner": "planner_service.app", "executor": "executor_service.app",
        "judge": "judge_service.app"}
QUIET_ENV = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


@dataclass
class ServiceProcess:
    """``role`` (planner, executor, judge) served by uvicorn with ``env`` on top of ours."""

    role: str
    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def of(cls, role: str, settings: BaseSettings, log_path: Path,
           extra_env: dict[str, str] | None = None) -> ServiceProcess:
        """A process whose settings are ``settings`` (passed as its environment)."""
        return cls(role, {**settings_env(settings), **(extra_env or {})}, log_path)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.proc is None, "already started"
        cmd = [sys.executable, "-m", "uvicorn", f"{APPS[self.role]}:create_app", "--factory",
               "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning",
               "--no-access-log"]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, env={**os.environ, **QUIET_ENV, **self.env},
                                         stdout=log, stderr=subprocess.STDOUT)

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Until ``/readyz`` answers 200 (the model has loaded)."""
        assert self.proc is not None, "not started"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.role} service exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"{self.role} service not ready after {timeout:.0f}s; "
                           f"log: {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None

    def __enter__(self) -> ServiceProcess:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


@contextlib.contextmanager
def running_services(*services: ServiceProcess) -> Iterator[tuple[ServiceProcess, ...]]:
    """Start them all (their models load in parallel), wait until each is ready, stop them all
    at the end, also when one fails to start."""
    started: list[ServiceProcess] = []
    try:
        for service in services:
            service.start()
            started.append(service)
        for service in started:
            service.wait_ready()
        yield services
    finally:
        for service in started:
            service.stop()
