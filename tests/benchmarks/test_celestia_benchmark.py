"""Smoke test of ``benchmarks/celestia.py``: the real script on a local slot and in a desktop
container, one round each and one replayed A-02 episode per provider; checks the JSON it writes
(never the timings) and that no container of the run is left. Without a Celestia build it
skips (CI=true: it fails)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.worker.celestia_helpers import require_image_build

ROOT = Path(__file__).resolve().parents[2]
SLOT = {"launch_ready_s", "reset_s", "screenshot_ms", "dump_ms"}

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_celestia_benchmark_writes_the_local_container_and_episode_figures(
        desktop_host: None, desktop_image: str, docker_client: Any, tmp_path: Path) -> None:
    require_image_build()
    out = tmp_path / "celestia.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.celestia", "--out", str(out), "--runs", "1",
         "--shots", "1", "--idle-s", "1", "--slots", "1", "--per-slot", "1"],
        cwd=ROOT, env={**os.environ, "CODA_LOG_LEVEL": "WARNING"}, capture_output=True,
        text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result) >= SLOT | {"idle_cpu_cores", "container", "episodes", "machine", "at"}
    assert set(result["container"]) >= SLOT
    assert all(result[k] > 0 and result["container"][k] > 0 for k in SLOT)
    for provider in ("local", "docker"):
        run = result["episodes"][provider]["1"]
        assert run["episodes_succeeded"] == run["episodes"] == 1, (provider, run)
        assert run["episodes_per_min"] > 0 and len(run["loadavg_before"]) == 3
    left = docker_client.containers.list(all=True, filters={"name": "coda-bench-celestia"})
    assert left == [], [c.name for c in left]
