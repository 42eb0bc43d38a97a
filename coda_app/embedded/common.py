"""What both embedded servers share: the error, the listen address and timeouts, the choice of a
port, stopping a leftover server process, and finding a wheel's files."""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import socket
import time
from pathlib import Path

import psutil

from coda.procs import free_port

HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class EmbeddedServiceError(RuntimeError):
    """An embedded server could not be found, started or stopped."""



def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on host:port now (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def pick_port(port: int | None, what: str) -> int:
    if port is None:
        return free_port()
    if not port_is_free(port):
        raise EmbeddedServiceError(
            f"{what}: port {port} on {HOST} is already in use; choose another port "
            "or leave it unset to pick a free one"
        )
    return port


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def process_in(pid: int, name_prefix: str, cwd: Path) -> psutil.Process | None:
    """The live process `pid` if it is a `name_prefix*` process working in `cwd`, else None
    (also when we may not inspect it: then we could not stop it either)."""
    try:
        proc = psutil.Process(pid)
        if not proc.name().startswith(name_prefix) or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc if Path(proc.cwd()).resolve() == cwd.resolve() else None
    except (psutil.Error, OSError, ValueError):
        return None


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE  # exited; its parent has not reaped it
    except psutil.NoSuchProcess:
        return True


def _wait_gone(proc: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(proc):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def terminate(
    proc: psutil.Process, *, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S
) -> None:
    """Signal a process we did not start and wait until it is gone (SIGKILL after timeout)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(sig)
        if not _wait_gone(proc, timeout):
            proc.kill()
            _wait_gone(proc, 10)


def package_dir(package: str, hint: str) -> Path:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServiceError(hint)
    return Path(next(iter(spec.submodule_search_locations)))
