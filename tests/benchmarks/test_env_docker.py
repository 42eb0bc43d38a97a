"""Smoke test of ``benchmarks/env.py --docker``: the real script with desktop containers beside
local slots, a few rounds; checks the JSON it writes (never the timings) and that no container
of the run is left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"docker_first_start_s", "docker_screenshot_ms_1280x800_png",
        "docker_cpu_percent_idle_slot", "docker_start_1_slots_s", "docker_episodes_per_min",
        "docker_vs_local_episodes_per_min", "episodes_per_min"}

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_env_benchmark_writes_the_docker_figures(desktop_host: None, desktop_image: str,
                                                 docker_client: Any, tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.env", "--out", str(out), "--docker",
         "--resets", "2", "--shots", "2", "--actions", "2", "--episodes", "1", "--slots", "1"],
        cwd=ROOT, env={**os.environ, "CODA_LOG_LEVEL": "WARNING"}, capture_output=True,
        text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result) >= KEYS, KEYS - set(result)
    for key in KEYS:
        assert isinstance(result[key], float) and result[key] >= 0, key
        assert result[key] > 0 or key == "docker_cpu_percent_idle_slot", key
    assert set(result["docker_reset_ready_s"]) == {"revert", "recreate"}
    assert len(result["docker_reset_ready_s_all"]["recreate"]) == 2
    assert set(result["docker_memory_mib_per_slot"]) == {"idle", "texstudio_open"}
    assert result["docker_episodes_completed"] == 2 and result["episodes_completed"] == 2
    assert len(result["episodes_per_min_runs"]) == len(result["docker_episodes_per_min_runs"]) == 2
    left = docker_client.containers.list(all=True, filters={"name": "coda-bench-"})
    assert left == [], [c.name for c in left]
