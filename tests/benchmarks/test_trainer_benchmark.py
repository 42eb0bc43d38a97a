"""Smoke test of benchmarks/trainer.py: the real script on the tiny model with a small screen
and one timed update per path; checks the JSON it writes (never the timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH_KEYS = {"update_s", "cpu_s", "tokens_per_s", "processed_tokens", "peak_memory_mb",
             "prompt_tokens", "image_tokens", "plan_tokens", "images_encoded"}


@pytest.mark.slow
def test_trainer_benchmark_writes_its_figures(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "trainer.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.trainer", "--out", str(out), "--model",
         str(tiny_model_dir), "--repeats", "1", "--g", "3", "--screen", "224", "140",
         "--plan-tokens", "12"],
        cwd=ROOT, env={**os.environ, "CODA_LOG_LEVEL": "WARNING"}, capture_output=True,
        text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert isinstance(result["shared_prefix_ratio"], float) and result["shared_prefix_ratio"] > 0
    assert result["target_ratio"] == 0.4 and result["g"] == 3
    for path in ("shared", "separate"):
        assert set(result[path]) >= PATH_KEYS
    assert result["shared"]["images_encoded"] == 2 and result["separate"]["images_encoded"] == 6
    assert result["shared"]["processed_tokens"] < result["separate"]["processed_tokens"]
