"""``python -m benchmarks.supervise`` runs and writes its key of the shared result file,
keeping the keys other benchmarks wrote there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fixtures.master import ROOT


def test_supervise_benchmark_writes_its_key(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    out.write_text(json.dumps({"capacity": {"kept": True}}))
    done = subprocess.run([sys.executable, "-m", "benchmarks.supervise", "--kills", "1",
                           "--interval", "0.2", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["capacity"] == {"kept": True}
    [row] = doc["supervise"]["restarts"]
    assert row["restart"] == 1 and row["backoff_s"] == 1.0
    assert row["kill_to_ready_s"] >= row["backoff_s"]
