"""A benchmark script run for real as a user runs it (``python -m benchmarks.NAME --out FILE
...``), for the smoke tests that check the JSON it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(name: str, out: Path, *args: str, timeout: float = 900) -> dict[str, Any]:
    """``benchmarks.NAME --out OUT ARGS`` (warnings only in its log); the JSON it wrote."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--out", str(out), *args], cwd=ROOT,
        env={**os.environ, "CODA_LOG_LEVEL": "WARNING"}, capture_output=True, text=True,
        timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result
