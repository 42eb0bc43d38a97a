"""Smoke test of benchmarks/env.py: the real script on the local provider with a few rounds;
checks the JSON it writes (never the timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"reset_ready_s", "screenshot_ms_1280x800_png", "screenshot_ms_1920x1080_png",
        "screenshot_ms_1280x800_webp", "osworld_screenshot_ms_1280x800_png",
        "screenshot_speedup_vs_osworld", "action_roundtrip_ms", "osworld_action_roundtrip_ms",
        "first_start_s", "reset_ready_s_all", "config", "machine", "step_overhead_ms",
        "episodes_per_min"}


@pytest.mark.slow
def test_env_benchmark_writes_its_figures(desktop_host: None, tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.env", "--out", str(out),
         "--resets", "2", "--shots", "2", "--actions", "2", "--episodes", "1", "--slots", "1"],
        cwd=ROOT, env={**os.environ, "CODA_LOG_LEVEL": "WARNING"}, capture_output=True,
        text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result) >= KEYS, KEYS - set(result)
    assert len(result["reset_ready_s_all"]) == 2
    assert result["episodes_completed"] == 1 and result["steps"] == 6
    assert "step_overhead_ms_1_slots" in result
    for key in KEYS - {"config", "machine", "reset_ready_s_all"}:
        assert isinstance(result[key], float) and result[key] > 0, key
