"""Finding this machine's ChimeraX build (``scripts/chimerax.sh``) for the tests that run it,
and ChimeraX started with its REST remote control, offline, on ScienceBoard's fetch cache."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from coda.procs import free_port
from tests.fixtures.waiting import exited, wait_for
from worker.providers.image import chimerax as build
from worker.tasks.adapters import chimerax as adapter

DATA = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "chimerax-data"
OFFLINE = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
           "no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}
"""Any download ChimeraX tries goes to a closed port: it must find its files in the cache."""


BUILD_WAIT_S = 5400.0
"""The longest a test waits for a build under way (a cold one took 14-22 minutes on 2 cores,
longer at the lowest priority beside the tests)."""


def wait_for_a_build_under_way(timeout: float = BUILD_WAIT_S) -> None:
    """Wait while ``scripts/chimerax.sh`` holds its build lock (``scripts/test.sh`` lets the
    build run on beside the tests); at once when no build runs."""
    lock = build.root() / ".build.lock"
    try:
        handle = lock.open("rb")
    except OSError:
        return  # never built here: no lock
    with handle:
        def free() -> bool:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(handle, fcntl.LOCK_UN)
            return True
        wait_for(free, f"ChimeraX's build under way ({lock} held by scripts/chimerax.sh)",
                 timeout, interval=5.0)


def require_build() -> Path:
    """This checkout's ChimeraX prefix, once a build under way has ended; skip (fail under
    CI=true) when it is not built. The script runs only when a build is there (it then just
    prints the prefix): it never starts a 20-minute build from a test."""
    wait_for_a_build_under_way()
    if build.is_built():
        done = subprocess.run(["bash", str(build.SCRIPT)], capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode == 0 and done.stdout.strip():
            return Path(done.stdout.strip())
        return build.prefix()
    line = (f"ChimeraX is not built for this checkout ({build.prefix()}): {build.BUILD_HINT}; "
            "scripts/test.sh builds it when its sources are there (CODA_CHIMERAX_SOURCES, "
            "or online)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(line)
    pytest.skip(line)


def place_fetch_cache(home: Path) -> None:
    """ScienceBoard's pre-placed files into ChimeraX's fetch cache under ``home``."""
    for rel, local in adapter.cache_files().items():
        target = home / "Downloads" / "ChimeraX" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, target)


class Rest:
    def __init__(self, port: int) -> None:
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, trust_env=False)

    def run(self, command: str) -> dict:
        reply = self.http.get("/run", params={"command": command})
        reply.raise_for_status()
        body: dict = reply.json()
        return body


@contextmanager
def chimerax(prefix: Path, home: Path, *, display: str | None = None) -> Iterator[Rest]:
    """ChimeraX (``--nogui`` unless a display is named) with REST on a free port, HOME at
    ``home`` (the fetch cache placed there), no network."""
    place_fetch_cache(home)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QT_", "PYTHON"))}
    env.update(OFFLINE, HOME=str(home))
    env.pop("XDG_RUNTIME_DIR", None)
    args = [str(prefix / build.LAUNCHER)]
    if display is None:
        args.append("--nogui")
        env.pop("DISPLAY", None)
    else:
        env["DISPLAY"] = display
    args += ["--cmd", f"remotecontrol rest start json true port {port}"]
    proc = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    rest = Rest(port)
    try:
        wait_for(lambda: rest.run("version") or True, "ChimeraX's REST port answering", 120,
                 interval=0.5, gone=exited(proc, "ChimeraX"),
                 logs=lambda: _output(proc))
        yield rest
    finally:
        rest.http.close()
        try:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, 9)
            proc.wait()


def _output(proc: subprocess.Popen[bytes]) -> str:
    """What an exited ChimeraX printed (nothing while it runs: its pipe would block)."""
    if proc.poll() is None or proc.stdout is None:
        return ""
    return proc.stdout.read().decode(errors="replace")[-2000:]
