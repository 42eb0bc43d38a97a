"""Smoke test of ``benchmarks/env.py --vsphere-only``: the real script with the vsphere provider
on VMware's simulator, one reset per mode and no episodes (whole episodes through vSphere are
tests/worker/test_vsphere_episodes.py's; the committed figures come from a full run); checks
the JSON it merges into an existing file (never the timings), that the file's other keys stay,
and that nothing of the run is left (the VMs' containers and volumes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.vcsim import leftovers

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_env_benchmark_merges_the_vsphere_figures(vcsim_bin: Path, desktop_image: str,
                                                  tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    out.write_text(json.dumps({"reset_ready_s": 0.1, "docker_episodes_per_min": 9.0}))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.env", "--out", str(out), "--vsphere-only",
         "--resets", "1", "--episodes", "0"],
        cwd=ROOT, env={**os.environ, "CODA_LOG_LEVEL": "WARNING", "CODA_VCSIM": str(vcsim_bin)},
        capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["reset_ready_s"] == 0.1 and result["docker_episodes_per_min"] == 9.0  # kept
    for key in ("vsphere_first_start_s", "vsphere_reset_ready_s"):
        assert set(result[key]) == {"clone", "revert"}
        assert all(v > 0 for v in result[key].values()), result[key]
    assert len(result["vsphere_reset_ready_s_all"]["revert"]) == 1
    assert "vsphere_episodes_per_min" not in result  # --episodes 0
    assert result["vsphere_config"]["resets"] == 1
    assert "vCenter" in result["vsphere_simulator"]["server"]
    assert leftovers("coda-bench-") == {"containers": [], "volumes": []}
