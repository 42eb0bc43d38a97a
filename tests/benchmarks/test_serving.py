"""Smoke test of benchmarks/serving.py: the real script, vLLM's own server and the
transformers backend on the tiny model, the smallest settings; checks the JSON it writes
(never the timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vllm.conftest import require_vllm

ROOT = Path(__file__).resolve().parents[2]
MODULE = "benchmarks.serving"


@pytest.mark.vllm
@pytest.mark.slow
def test_serving_benchmark_writes_its_figures(tiny_model_dir: Path, tmp_path: Path) -> None:
    require_vllm()
    out = tmp_path / "serving.json"
    env = {**os.environ, "CODA_LOG_LEVEL": "WARNING"}
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "--out", str(out), "--model", str(tiny_model_dir),
         "--g", "2", "--max-tokens", "2", "--repeats", "1", "--votes", "1",
         "--parity-groups", "1", "--screen", "112x84"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for side in ("vllm", "transformers"):
        assert set(result[side]) >= {"plans_per_s", "actions_per_s", "judge_call_s", "runs_s"}
        assert result[side]["plans_per_s"] > 0 and result[side]["judge_call_s"] > 0
    assert result["plans_per_s_ratio"] > 0 and result["actions_per_s_ratio"] > 0
    parity = result["logprob_parity"]
    assert parity["groups"] == 1 and parity["tokens"] >= 1
    assert 0 <= parity["mean_abs_diff"] <= parity["max_abs_diff"]
    assert result["vllm_version"] == "0.32.0" and "--enable-lora" in result["vllm_flags"]
    assert (result["g"], result["max_tokens"], result["repeats"]) == (2, 2, 1)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", MODULE, "--out", str(tmp_path / "x.json"), "--g", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "--g" in proc.stderr
    assert not (tmp_path / "x.json").exists()
