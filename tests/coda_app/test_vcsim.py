"""``coda vcsim serve``, the developers' simulator: it starts vcsim with a template VM of the
desktop image, prints working provider settings for a worker, and on Ctrl-C stops it and
leaves nothing behind."""

from __future__ import annotations

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


def test_coda_vcsim_serve_prints_settings_that_work_and_stops_clean(
        vcsim_bin: Path, desktop_image: str, tmp_path: Path) -> None:
    out = tmp_path / "serve.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "coda_app.cli", "vcsim", "serve", "--prefix", "coda-tcli"],
            cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "CODA_VCSIM": str(vcsim_bin)})
    try:
        line = wait_for(lambda: next((x for x in out.read_text().splitlines()
                                      if x.startswith("CODA_WORKER_PROVIDER_OPTIONS=")), None),
                        "the printed settings", 120, logs=out.read_text, interval=0.2)
        options = json.loads(line.split("=", 1)[1].strip("'"))
        assert options["mode"] == "clone" and options["template"] == "coda-tcli-template"
        provider = make_provider("vsphere", options)
        assert isinstance(provider, VsphereProvider)
        with provider:
            assert find_vm(provider.connection(), "coda-tcli-template") is not None
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
    assert code == 0, out.read_text()[-3000:]
    assert leftovers("coda-tcli") == {"containers": [], "volumes": []}
