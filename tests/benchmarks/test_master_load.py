"""Smoke test of the master load benchmark: the real script, a few seconds, ~10 slots.

Only the shape of the result is checked (no timing assertions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.loadgen.figures import overlap, percentile, route_figures

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"slots", "duration_s", "requests_per_s", "p50_ms", "p99_ms", "errors", "utilization",
        "routes", "cpu", "jobs_completed"}


def test_percentile_and_overlap() -> None:
    assert percentile([], 99) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert overlap(0, 10, 5, 20) == 5
    assert overlap(0, 4, 5, 20) == 0
    assert route_figures([], 0, 1.0)["p99_ms"] is None


def test_master_load_smoke(tmp_path: Path, postgres_server_url: str,
                           fresh_redis_url: str) -> None:
    out = tmp_path / "load.json"
    env = {**os.environ, "DATABASE_URL": postgres_server_url, "REDIS_URL": fresh_redis_url}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.master_load", "--slots", "10", "--duration", "4",
         "--workers", "1", "--procs", "1", "--episode-s", "3", "--step-s", "1",
         "--heartbeat-s", "1.5", "--ramp-s", "1", "--warmup-s", "1.5", "--wait-s", "1",
         "--step-window-s", "2", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc.keys() >= KEYS
    assert doc["slots"] == 10
    assert doc["duration_s"] == 4
    assert set(doc["routes"]) == {
        "POST /v1/workers", "POST /v1/jobs/lease", "POST /v1/jobs/heartbeat",
        "POST /v1/jobs/{job_id}/heartbeat", "POST /v1/jobs/{job_id}/steps",
        "POST /v1/jobs/steps", "POST /v1/jobs/{job_id}/complete"}
    for figures in doc["routes"].values():
        assert {"requests", "requests_per_s", "errors", "p50_ms", "p99_ms",
                "shed"} <= figures.keys()
    assert doc["requests"] > 0
    # the simulated worker heartbeats all its leases in one call, as coda worker does
    assert doc["routes"]["POST /v1/jobs/heartbeat"]["requests"] > 0
    assert doc["routes"]["POST /v1/jobs/{job_id}/heartbeat"]["requests"] == 0
    # and sends its slots' step reports in one call per window, as coda worker does
    assert doc["routes"]["POST /v1/jobs/steps"]["requests"] > 0
    assert doc["routes"]["POST /v1/jobs/{job_id}/steps"]["requests"] == 0
    assert doc["errors"] == 0 and doc["lost_leases"] == 0
    assert {"shed", "shed_p99_ms"} <= doc.keys()
    assert 0.0 <= doc["utilization"] <= 1.0
