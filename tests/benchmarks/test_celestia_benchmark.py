"""Smoke test of ``benchmarks/celestia.py``: the real script on a local slot and in a desktop
container, one round each and one replayed A-02 episode per provider; checks the JSON it writes
(never the timings) and that no container of the run is left. Without a Celestia build it
skips (CI=true: it fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.running import run_benchmark
from tests.worker.celestia_helpers import require_image_build

SLOT = {"launch_ready_s", "reset_s", "screenshot_ms", "dump_ms"}

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_celestia_benchmark_writes_the_local_container_and_episode_figures(
        desktop_host: None, desktop_image: str, docker_client: Any, tmp_path: Path) -> None:
    require_image_build()
    result = run_benchmark("celestia", tmp_path / "celestia.json", "--runs", "1", "--shots", "1",
                           "--idle-s", "1", "--slots", "1", "--per-slot", "1")
    assert set(result) >= SLOT | {"idle_cpu_cores", "container", "episodes", "machine", "at"}
    assert set(result["container"]) >= SLOT
    assert all(result[k] > 0 and result["container"][k] > 0 for k in SLOT)
    for provider in ("local", "docker"):
        run = result["episodes"][provider]["1"]
        assert run["episodes_succeeded"] == run["episodes"] == 1, (provider, run)
        assert run["episodes_per_min"] > 0 and len(run["loadavg_before"]) == 3
    left = docker_client.containers.list(all=True, filters={"name": "coda-bench-celestia"})
    assert left == [], [c.name for c in left]
