"""Small helpers for the processes CODA starts: free ports and clean stops."""

from __future__ import annotations

import signal
import socket
import subprocess


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on host (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


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
