"""A service as a real process (uvicorn on a free port): the model services of ``coda up``'s
stack, tests and benchmarks, and the master of ``coda learn``."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from pydantic_settings import BaseSettings

from coda.modelservice.settings import settings_env
from coda.procs import free_port, log_tail, start_process, stop_process, wait_ready

APPS = {"planner": "planner_service.app", "executor": "executor_service.app",
        "judge": "judge_service.app", "master": "master.app"}
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
        self.proc = start_process(cmd, env={**QUIET_ENV, **self.env}, log=self.log_path)

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Until ``/readyz`` answers 2xx (the model has loaded)."""
        assert self.proc is not None, "not started"
        wait_ready(self.proc, f"{self.url}/readyz", name=f"{self.role} service",
                   timeout=timeout, log=self.log_path)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def restart(self) -> None:
        """Start it again on the same port (clients keep its URL), once the old one is gone."""
        self.stop()
        self.start()

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
