"""``coda vcsim serve``, the developers' simulator: it starts vcsim with a template VM of the
desktop image, prints working provider settings for a worker, and on Ctrl-C or SIGTERM stops it
and leaves nothing behind.

It is started the way a CI run in the background starts everything: with SIGINT ignored (what a
non-interactive shell gives a job started with ``&``). Before ``serve`` handled that, its Ctrl-C
did nothing there: the test timed out after 120 s and left ``coda vcsim serve`` and vcsim
running for the rest of the machine's life."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.vcsim import leftovers
from tests.fixtures.waiting import wait_for
from worker.providers.factory import make_provider
from worker.providers.vsphere import VsphereProvider, find_vm

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _remove_leftovers(prefix: str) -> None:
    """What a serve that did not stop left: its VMs' containers and volumes."""
    for kind, names in leftovers(prefix).items():
        for name in names:
            cmd = ["docker", "rm", "-f", "-v", name] if kind == "containers" else \
                ["docker", "volume", "rm", "-f", name]
            subprocess.run(cmd, capture_output=True, check=False)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_coda_vcsim_serve_prints_settings_that_work_and_stops_clean(
        vcsim_bin: Path, desktop_image: str, tmp_path: Path, sig: int) -> None:
    prefix = f"coda-tcli{int(sig)}"
    out = tmp_path / "serve.out"
    with out.open("wb") as sink:
        # its own process group, so that a serve that does not stop is killed with its vcsim
        # SIGINT ignored (`trap '' INT`, kept across exec), as a job started with `&` by a
        # non-interactive shell inherits it
        proc = subprocess.Popen(
            ["sh", "-c", 'trap "" INT; exec "$0" -m coda_app.cli vcsim serve --prefix "$1"',
             sys.executable, prefix],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "CODA_VCSIM": str(vcsim_bin)})
    stopped = False
    try:
        line = wait_for(lambda: next((x for x in out.read_text().splitlines()
                                      if x.startswith("CODA_WORKER_PROVIDER_OPTIONS=")), None),
                        "the printed settings", 300, logs=out.read_text, interval=0.2,
                        gone=lambda: None if proc.poll() is None else f"serve exited "
                                                                       f"({proc.returncode})")
        options = json.loads(line.split("=", 1)[1].strip("'"))
        assert options["mode"] == "clone" and options["template"] == f"{prefix}-template"
        provider = make_provider("vsphere", options)
        assert isinstance(provider, VsphereProvider)
        with provider:
            assert find_vm(provider.connection(), f"{prefix}-template") is not None
        proc.send_signal(sig)
        # its stop is bounded by vcsim's (stop_process: 120 s, then SIGKILL) and the removal
        # of the VMs' containers; the deadline only bounds a hang
        code = proc.wait(300)
        stopped = True
    finally:
        if not stopped:  # never leave the simulator running after a failed test
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
            _remove_leftovers(prefix)
    assert code == 0, out.read_text()[-3000:]
    assert leftovers(prefix) == {"containers": [], "volumes": []}
