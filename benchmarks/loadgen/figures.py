"""Figures of a load run: latency percentiles and per-route summaries (pure)."""

from __future__ import annotations

from typing import Any

from benchmarks.common import percentile, rounded

ROUTES = ("register", "lease", "heartbeats", "heartbeat", "step", "steps", "complete")
ROUTE_PATHS = {
    "register": "POST /v1/workers",
    "lease": "POST /v1/jobs/lease",
    "heartbeats": "POST /v1/jobs/heartbeat",
    "heartbeat": "POST /v1/jobs/{job_id}/heartbeat",
    "step": "POST /v1/jobs/{job_id}/steps",
    "steps": "POST /v1/jobs/steps",
    "complete": "POST /v1/jobs/{job_id}/complete",
}


def overlap(start: float, end: float, lo: float, hi: float) -> float:
    """Length of [start, end] inside [lo, hi]."""
    return max(0.0, min(end, hi) - max(start, lo))


def route_figures(latencies_ms: list[float], errors: int, window_s: float) -> dict[str, Any]:
    return {
        "requests": len(latencies_ms),
        "requests_per_s": round(len(latencies_ms) / window_s, 2) if window_s > 0 else 0.0,
        "errors": errors,
        "p50_ms": rounded(percentile(latencies_ms, 50)),
        "p90_ms": rounded(percentile(latencies_ms, 90)),
        "p99_ms": rounded(percentile(latencies_ms, 99)),
        "max_ms": rounded(max(latencies_ms) if latencies_ms else None),
        "mean_ms": rounded(sum(latencies_ms) / len(latencies_ms) if latencies_ms else None),
    }
