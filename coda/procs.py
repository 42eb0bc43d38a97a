"""The processes CODA starts: free ports, one way to start a process and wait until it is
ready, clean stops, and the processes of a desktop found and killed by their mark."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

from coda.guestenv import DESKTOP_MARK

Probe = str | Callable[[], bool]
"""Readiness: an HTTP URL that answers 2xx, or a callable that returns True once ready."""


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 20_000  # below: most registered services and common development servers


def ephemeral_ports(source: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = (int(x) for x in source.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on host, picked below the ephemeral range.

    The kernel's own pick (bind to port 0) comes from the ephemeral range, the one Docker also
    draws from when it publishes a container's port on a host port of its choice and the one an
    outgoing connection takes its source port from: a port picked there could be taken by either
    before its user binds it (a compose project once failed with "port is already allocated").
    The kernel's pick is the fallback where no port below that range is free."""
    low, _ = ephemeral_ports()
    rng = random.SystemRandom()
    if low - 1 > LOWEST_PORT:
        for port in rng.sample(range(LOWEST_PORT, low), min(64, low - LOWEST_PORT)):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def start_process(cmd: Sequence[str], *, env: Mapping[str, str] | None = None,
                  log: Path | None = None, cwd: Path | str | None = None,
                  new_session: bool = False) -> subprocess.Popen[bytes]:
    """``cmd`` with ``env`` on top of this process's environment, its stdout and stderr
    appended to ``log`` (discarded when None); ``new_session``: its own process group, so
    that what it forks can be killed with it even after it died."""
    full_env = {**os.environ, **(env or {})}
    if log is None:
        return subprocess.Popen(list(cmd), cwd=cwd, env=full_env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, start_new_session=new_session)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(list(cmd), cwd=cwd, env=full_env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=new_session)


def log_tail(log: Path | None, chars: int = 3000) -> str:
    """The end of a process's log ("" when there is none)."""
    if log is None or not log.exists():
        return ""
    return log.read_text(errors="replace")[-chars:]


def _ready(probe: Probe) -> bool:
    try:
        if isinstance(probe, str):
            return httpx.get(probe, timeout=2).is_success
        return bool(probe())
    except (httpx.HTTPError, OSError):
        return False


def wait_ready(proc: subprocess.Popen[bytes], probe: Probe, *, name: str,
               timeout: float = 60.0, log: Path | None = None, interval: float = 0.2) -> None:
    """Poll ``probe`` until it says ready. Raises RuntimeError with the log's tail as soon as
    the process exits, TimeoutError (naming the probe and the log) after ``timeout`` s; the
    process is left running either way (the caller stops it)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} while starting; "
                               f"log tail:\n{log_tail(log)}")
        if _ready(probe):
            return
        if time.monotonic() >= deadline:
            what = probe if isinstance(probe, str) else getattr(probe, "__name__", "probe")
            raise TimeoutError(f"{name} not ready after {timeout:.0f}s (waiting for {what}); "
                               f"log: {log}\n{log_tail(log)}")
        time.sleep(interval)


def start_ready(cmd: Sequence[str], probe: Probe, *, name: str,
                env: Mapping[str, str] | None = None, log: Path | None = None,
                cwd: Path | str | None = None, timeout: float = 60.0, interval: float = 0.2,
                new_session: bool = False) -> subprocess.Popen[bytes]:
    """:func:`start_process`, then :func:`wait_ready`; a process that does not become ready
    is stopped before the error is raised."""
    proc = start_process(cmd, env=env, log=log, cwd=cwd, new_session=new_session)
    try:
        wait_ready(proc, probe, name=name, timeout=timeout, log=log, interval=interval)
    except BaseException:
        stop_process(proc)
        raise
    return proc


def stop_process(proc: subprocess.Popen[bytes] | subprocess.Popen[str], *,
                 timeout: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """``sig`` (SIGTERM; SIGINT stops it as Ctrl-C would), wait up to ``timeout``, then
    SIGKILL; returns once the process is gone."""
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def marked_pids(desktop_id: str) -> list[int]:
    """Processes whose environment carries ``CODA_DESKTOP=<desktop_id>`` (what a desktop's
    agent started, their children and daemons they spawned), found through /proc."""
    needle = f"{DESKTOP_MARK}={desktop_id}".encode()
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_marked(desktop_id: str, *, grace_s: float = 0.5) -> int:
    """SIGTERM every marked process, SIGKILL what is left after ``grace_s``; returns how many
    were found. Returns once none is left (or after a bounded number of rounds)."""
    pids = marked_pids(desktop_id)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if alive(p)]
    for _ in range(50):
        left = marked_pids(desktop_id)
        if not left:
            break
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.02)
    return len(pids)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
