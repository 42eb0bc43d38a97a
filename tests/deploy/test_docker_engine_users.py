"""scripts/docker-engine.sh's ``stop-unused``: the engine a test run started stays up while a
run of another checkout still uses it (holds a shared lock on the ``users`` file), and is
stopped once none does. Before, the first run's exit stopped the engine under the second,
whose docker tests then errored.

The recorded "dockerd" is a stand-in process (``sleep``): ``stop`` only signals the pid that
``start`` recorded, so what is checked is the script's own decision, on its own files."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.waiting import wait_for

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docker-engine.sh"


def engine(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, "CODA_DOCKER_STATE": str(state)}, timeout=120,
                          check=False)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    """A state folder whose recorded dockerd is a stand-in process (not this process's
    child, as dockerd is not: its parent reaps it when it ends)."""
    state = tmp_path / "docker"
    state.mkdir()
    pid = int(subprocess.run(["bash", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    (state / "dockerd.pid").write_text(f"{pid}\n")
    yield state, pid
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_the_engine_stays_up_while_another_run_uses_it(started: tuple[Path, int]) -> None:
    state, stand_in = started
    users = engine(state, "users").stdout.strip()
    assert users == str(state / "users.lock")
    # another checkout's run (flock and its sleep, which inherits the lock: one group)
    other_run = subprocess.Popen(["flock", "-s", users, "sleep", "600"], start_new_session=True)
    try:
        wait_for(lambda: subprocess.run(["flock", "-n", "-x", users, "true"],
                                        check=False).returncode != 0,
                 "the other run holding its lock", 30)
        out = engine(state, "stop-unused")
        assert out.returncode == 0, out.stderr
        assert "another run still uses it" in out.stderr
        assert alive(stand_in) and (state / "dockerd.pid").exists()
    finally:
        os.killpg(other_run.pid, signal.SIGKILL)
        other_run.wait()
    out = engine(state, "stop-unused")  # nobody uses it now: stopped
    assert out.returncode == 0 and "stopping the dockerd" in out.stderr, out.stderr
    wait_for(lambda: not alive(stand_in), "the stand-in dockerd gone", 60)
    assert not (state / "dockerd.pid").exists()


def test_an_engine_this_script_did_not_start_is_never_stopped(tmp_path: Path) -> None:
    out = engine(tmp_path / "docker", "stop-unused")
    assert out.returncode == 0 and "stopping" not in out.stderr
