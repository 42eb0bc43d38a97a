"""The processes of one closed-loop run: the master on stores of its own, the three model
services and a ``coda worker`` with its desktops, each a real process with its log in the run's
``logs/`` folder. Services and the worker can be replaced between the run's phases (the
recording planner, then the planner being trained); the master and its data stay."""

from __future__ import annotations

import contextlib
import secrets
import subprocess
import sys
from pathlib import Path
from types import TracebackType

from pydantic import SecretStr
from pydantic_settings import BaseSettings

from coda.logging import get_logger
from coda.procs import start_process, stop_process
from coda_app.embedded.services import private_stores
from coda_app.services import ServiceProcess
from coda_app.stack import ROLES, worker_env

log = get_logger("coda_app.learning.system")
ROOT = Path(__file__).resolve().parents[2]


def _secret() -> SecretStr:
    return SecretStr(secrets.token_hex(24))


class LocalSystem:
    """``with LocalSystem(run_dir) as system:`` the master is up; then
    :meth:`start_services` and :meth:`start_worker`."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.logs = run_dir / "logs"
        self.artifacts = run_dir / "artifacts"
        self.admin_token = _secret()
        self.worker_token = _secret()
        self.service_token = _secret()
        self.service_admin_token = _secret()
        self.master: ServiceProcess | None = None
        self.services: dict[str, ServiceProcess] = {}
        self.worker: subprocess.Popen[bytes] | None = None
        self._exit = contextlib.ExitStack()

    @property
    def master_url(self) -> str:
        assert self.master is not None, "not started"
        return self.master.url

    def url(self, role: str) -> str:
        return self.services[role].url

    def __enter__(self) -> LocalSystem:
        from master.settings import MasterSettings

        self.logs.mkdir(parents=True, exist_ok=True)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        try:
            stores = self._exit.enter_context(private_stores(self.run_dir / "stores",
                                                             prefix="coda-learn"))
            settings = MasterSettings(
                database_url=stores.database_url, redis_url=stores.redis_url,
                redis_prefix=stores.redis_prefix, admin_token=self.admin_token,
                worker_tokens=[self.worker_token], artifacts_url=str(self.artifacts),
                log_level="WARNING")
            self.master = ServiceProcess.of("master", settings, self.logs / "master.log")
            self.master.start()
            self._exit.callback(self.master.stop)
            self.master.wait_ready(timeout=180)
        except BaseException:
            self._exit.close()
            raise
        log.info("learn.master_up", url=self.master.url, logs=str(self.logs))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_worker()
        for role in list(self.services):
            self.stop_service(role)
        self._exit.close()

    def start_services(self, settings: dict[str, BaseSettings], *, phase: str,
                       env: dict[str, str] | None = None) -> None:
        """Start the given roles' services (each on a free port, ``env`` on top of their
        settings) and wait until each answers ``/readyz``; a role already running is stopped
        first."""
        for role, s in settings.items():
            self.stop_service(role)
            proc = ServiceProcess.of(role, s, self.logs / f"{phase}-{role}.log", env)
            proc.start()
            self.services[role] = proc
        for role in settings:
            self.services[role].wait_ready(timeout=600)
        log.info("learn.services_up", phase=phase, roles=sorted(settings))

    def stop_service(self, role: str) -> None:
        proc = self.services.pop(role, None)
        if proc is not None:
            proc.stop()

    def start_worker(self, *, slots: int, job_slots: int, phase: str,
                     extra: dict[str, str]) -> None:
        """``coda worker`` on the running services, with ``extra`` settings on top."""
        self.stop_worker()
        env = worker_env(self.master_url, self.worker_token, self.service_token,
                         {role: self.url(role) for role in ROLES}, slots=slots,
                         job_slots=job_slots, slot_root=self.run_dir / "desktops",
                         name=f"learn-{phase}")
        self.worker = start_process([sys.executable, "-m", "worker.cli"], env={**env, **extra},
                                    log=self.logs / f"{phase}-worker.log", cwd=ROOT)
        log.info("learn.worker_started", phase=phase, slots=slots, pid=self.worker.pid)

    def worker_alive(self) -> bool:
        return self.worker is not None and self.worker.poll() is None

    def stop_worker(self) -> None:
        if self.worker is not None:
            stop_process(self.worker, timeout=90)
            self.worker = None
