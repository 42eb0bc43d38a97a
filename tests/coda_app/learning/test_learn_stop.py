"""``coda learn`` stopped from outside (SIGTERM, as a supervisor or ``kill`` stops it, and
Ctrl-C) while its loop runs: it exits and leaves nothing of its run behind: no private Postgres
or Redis, no desktop, no service, no worker (the default SIGTERM action left the private stores
running). A real run, stopped once its worker has started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from coda_app.learning.settings import CURRICULA
from tests.fixtures.waiting import wait_for

pytestmark = pytest.mark.slow


def processes_of(run_dir: Path) -> dict[int, str]:
    """Processes whose command line or environment names the run's folder, or the PostgreSQL
    cluster its stores link to (placed under /var/lib/coda where the server's user cannot reach
    the run's folder): pid -> command."""
    needles = [str(run_dir).encode()]
    cluster = run_dir / "stores" / "postgres"
    if cluster.is_symlink():
        needles.append(str(cluster.resolve()).encode())
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(n in cmdline or n in environ for n in needles):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode()[:200]
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_run_leaves_none_of_its_processes(
        signum: signal.Signals, desktop_host: None, tiny_model_dir: Path,
        tmp_path: Path) -> None:
    tasks = tmp_path / "curricula"
    tasks.mkdir()
    text = (CURRICULA / "kalgebra-C-06.json").read_text().replace(
        "../scienceboard", str(CURRICULA.parent / "scienceboard"))
    (tasks / "kalgebra-C-06.json").write_text(text)
    home = tmp_path / "home"
    env = {**os.environ, "CODA_LEARN_HOME": str(home), "CODA_LEARN_RUN_NAME": "stopped",
           "CODA_LEARN_PLANNER_MODEL": str(tiny_model_dir), "CODA_LEARN_WARM_UP": "false",
           "CODA_LEARN_UPDATES": "1", "CODA_LEARN_ROLLOUTS": "2", "CODA_LEARN_SLOTS": "1",
           "CODA_LEARN_MAX_STEPS": "2"}
    log = tmp_path / "learn.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "coda_app.cli", "learn", str(tasks),
                                 "--log-format", "json"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: proc.poll() is None and b"learn.worker_started" in log.read_bytes(),
                 "coda learn's worker started", 600,
                 logs=lambda: log.read_text(errors="replace")[-3000:])
        run_dir = home / "runs" / "stopped"
        running = processes_of(run_dir)  # its stores, desktops and services
        assert any("postgres" in c for c in running.values()), running
        proc.send_signal(signum)
        wait_for(lambda: proc.poll() is not None, f"coda learn stopped after {signum.name}",
                 240, logs=lambda: log.read_text(errors="replace")[-3000:])
        wait_for(lambda: not processes_of(run_dir), "nothing of the run left",
                        60, logs=lambda: str(processes_of(run_dir)))
        assert "Traceback" not in log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
