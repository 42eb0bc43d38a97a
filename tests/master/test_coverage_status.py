"""The task coverage report (``coda tasks coverage``) on the status JSON and the dashboard, and
a file that is no report refuses the start, naming the setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from coda.contracts.coverage import AppCoverage, CoverageReport

ROOT = Path(__file__).resolve().parents[2]


def report() -> CoverageReport:
    kalgebra = AppCoverage(app="KAlgebra", tasks=31, loaded=31, implemented=31, runnable=29,
                           reasons={"a curve's colour is not readable": ["VM/KAlgebra/B-04"]})
    return CoverageReport(provider="local", folder="examples/scienceboard", apps=[kalgebra],
                          total=kalgebra.model_copy(update={"app": "total"}))


def test_the_status_and_the_dashboard_show_the_coverage(master_factory, tmp_path: Path) -> None:
    path = tmp_path / "coverage.json"
    path.write_text(report().model_dump_json())
    master = master_factory(CODA_COVERAGE_FILE=str(path))
    status = httpx.get(f"{master.url}/v1/status", timeout=30).json()
    assert CoverageReport.model_validate(status["coverage"]) == report()
    page = httpx.get(f"{master.url}/", timeout=30).text
    assert "Tasks with a real verdict (provider local" in page
    assert "a curve&#39;s colour is not readable" in page and "VM/KAlgebra/B-04" in page
    assert httpx.get(f"{master_factory().url}/v1/status", timeout=30).json()["coverage"] is None


@pytest.mark.parametrize("content", [None, b"{}", b"not json"])
def test_a_file_that_is_no_report_refuses_the_start(tmp_path: Path, content: bytes | None,
                                                    ) -> None:
    path = tmp_path / "coverage.json"
    if content is not None:
        path.write_bytes(content)
    out = subprocess.run(
        [sys.executable, "-c", "from master.app import create_app; create_app()"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"CODA_DEV": "true", "CODA_COVERAGE_FILE": str(path), "PATH": "/usr/bin:/bin",
             "PYTHONPATH": str(ROOT)})
    assert out.returncode != 0
    assert f"CODA_COVERAGE_FILE={path}: not a coverage report" in out.stderr
