"""Smoke test of benchmarks/sampling.py: the real script, real services over real HTTP on the
tiny model, one round of tiny generations; checks the JSON it writes (never the timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = "benchmarks.sampling"

KEYS = {
    "plan_batch_s", "plan_sequential_s", "plan_batch_speedup",
    "act_batch_s", "act_sequential_s", "act_batch_speedup",
    "tokens", "output_chars", "runs_s", "n", "max_tokens", "repeats", "model", "device",
    "torch_threads", "backend", "screen",
}
PATHS = {"plan_batch", "plan_sequential", "act_batch", "act_sequential"}


@pytest.mark.slow
def test_sampling_benchmark_writes_its_figures(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sampling.json"
    env = {**os.environ, "CODA_LOG_LEVEL": "WARNING"}
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "--out", str(out), "--model", str(tiny_model_dir),
         "--repeats", "1", "--max-tokens", "2", "--n", "2", "--screen", "640x400"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]

    result = json.loads(out.read_text())
    assert set(result) >= KEYS, KEYS - set(result)
    for key in ("plan_batch_s", "plan_sequential_s", "act_batch_s", "act_sequential_s"):
        assert isinstance(result[key], float) and result[key] > 0
    assert isinstance(result["plan_batch_speedup"], float)
    assert isinstance(result["act_batch_speedup"], float)
    assert set(result["tokens"]) == PATHS == set(result["runs_s"])
    # the planner reports exact counts: n samples of at most max_tokens each
    assert 0 < result["tokens"]["plan_batch"] <= 2 * 2
    assert 0 < result["tokens"]["plan_sequential"] <= 2 * 2
    assert all(len(runs) == 1 for runs in result["runs_s"].values())
    assert (result["n"], result["max_tokens"], result["repeats"]) == (2, 2, 1)
    assert result["model"] == str(tiny_model_dir)
    assert result["device"] == "cpu" and result["torch_threads"] >= 1


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "--out", str(tmp_path / "x.json"), "--repeats", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "--repeats" in proc.stderr
    assert not (tmp_path / "x.json").exists()
