"""The desktop slot image's entry (``python -m worker.guest.session serve``) on this host,
without Docker: it refuses to start without a token, brings Xvfb, the window manager and the
agent up (the shared readiness probe passes), and exits with the code naming the process that
died, which the docker provider turns into a typed reason."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coda.contracts.desktop import SESSION_EXIT_CODES as EXIT_CODES
from coda.contracts.desktop import SESSION_EXIT_CONFIG as EXIT_CONFIG
from coda.contracts.desktop import SESSION_EXIT_REASONS as EXIT_REASONS
from coda.contracts.desktop import BrokenReason
from coda.procs import free_port, stop_process
from worker.guest.session import parse_screen
from worker.providers.client import GuestClient

ROOT = Path(__file__).resolve().parents[2]


def test_parse_screen() -> None:
    assert parse_screen("1024x768") == (1024, 768)
    for bad in ("1024", "x768", "axb", "10x10"):
        with pytest.raises(ValueError, match="WIDTHxHEIGHT"):
            parse_screen(bad)


def _session(tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODA_")}
    return subprocess.Popen(
        [sys.executable, "-m", "worker.guest.session", "serve"], cwd=ROOT, text=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**base, "CODA_LOG_FORMAT": "json", "XDG_RUNTIME_DIR": str(tmp_path / "run"),
             "HOME": str(tmp_path), **env})


def test_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    proc = _session(tmp_path, CODA_GUEST_TOKEN="short")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_CONFIG
    assert "CODA_GUEST_TOKEN" in err
    assert EXIT_REASONS[EXIT_CONFIG] is BrokenReason.START_FAILED


@pytest.fixture
def session(desktop_host: None, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str],
                                                                  GuestClient, dict[str, int]]]:
    token = secrets.token_urlsafe(24)
    port = free_port()
    proc = _session(tmp_path, CODA_GUEST_TOKEN=token, CODA_GUEST_PORT=str(port),
                    CODA_GUEST_HOST="127.0.0.1", CODA_DESKTOP_SCREEN="1024x768")
    assert proc.stderr is not None
    pids: dict[str, int] = {}
    for line in proc.stderr:  # the session says when its processes are up, and their pids
        if "desktop.session_started" in line:
            pids = json.loads(line)["pids"]
            break
    assert pids, "the session did not start"
    guest = GuestClient(f"http://127.0.0.1:{port}", token=token)
    try:
        yield proc, guest, pids
    finally:
        guest.close()
        stop_process(proc, timeout=10)


def test_starts_a_ready_desktop_and_stops_on_sigterm(
        session: tuple[subprocess.Popen[str], GuestClient, dict[str, int]]) -> None:
    proc, guest, _ = session
    assert guest.wait_ready(timeout=30).ok
    assert guest.screen_size() == (1024, 768)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("process", ["xvfb", "wm", "agent"])
def test_exits_with_the_code_of_the_process_that_died(
        session: tuple[subprocess.Popen[str], GuestClient, dict[str, int]], process: str) -> None:
    proc, guest, pids = session
    assert guest.wait_ready(timeout=30).ok
    os.kill(pids[process], signal.SIGKILL)
    code = proc.wait(timeout=30)
    assert code == EXIT_CODES[process]
    expected = BrokenReason.AGENT_GONE if process == "agent" else BrokenReason.X_CRASHED
    assert EXIT_REASONS[code] is expected
    for pid in pids.values():  # the others were stopped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
