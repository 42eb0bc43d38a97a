"""How long the system takes to notice an infrastructure fault and to recover from it, as the
fault tests measure it (issue 31: infrastructure faults must not burn work).

``python -m benchmarks.faults`` runs the fault tests with ``CODA_FAULTS_REPORT`` set (each test
records its durations with :func:`tests.fixtures.faults.record`; the tests assert that no episode
fails for good, nothing is doubled and nothing is left behind, never how fast) and writes
``benchmarks/results/faults.json``: per fault, the seconds until the job was given back or the
fault reported, and until work resumed once the fault was gone, with the attempts the episode
spent. The tests run the worker with ``provider_probe_max_s`` 2 (the default is 30: a provider
that comes back waits at most that long for the next probe). ``--rebuild IMAGE`` (repeatable)
also times ``scripts/docker-build.sh IMAGE`` twice on unchanged sources (the second is the
rebuild, from the engine's layer cache), then after a one-line change of the code (taken
out again afterwards), with the ``CODA_IMAGE_TAG`` in use.

Needs what the tests need: PostgreSQL and Redis (``DATABASE_URL`` / ``REDIS_URL`` or the
embedded ones), the desktop packages, the Docker engine and the desktop image, vcsim.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import configure_bench_logging, loadavg, machine, write_result
from coda.logging import get_logger

log = get_logger("coda.bench.faults")
ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "faults.json"
TESTS = ["tests/worker/test_infra_faults.py", "tests/worker/test_vsphere_fault_episodes.py",
         "tests/worker/test_docker_faults.py::"
         "test_a_worker_whose_image_is_missing_leases_nothing_until_it_is_there",
         "tests/master/test_store_outages.py"]


def run_tests(report: Path, tests: list[str]) -> int:
    env = {**os.environ, "CODA_FAULTS_REPORT": str(report)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *tests], cwd=ROOT, env=env, check=False).returncode


CHANGED = ROOT / "coda" / "__init__.py"
"""The source a code change is made in (every image installs the package it belongs to)."""


def build_s(image: str) -> float:
    started = time.monotonic()
    subprocess.run(["bash", str(ROOT / "scripts" / "docker-build.sh"), image], cwd=ROOT,
                   check=True, capture_output=True)
    return round(time.monotonic() - started, 2)


def rebuild(image: str) -> dict[str, Any]:
    """Seconds of a build of ``image``, of a rebuild right after it (nothing changed), and of
    a rebuild after a one-line change of the code (a comment added to ``coda/__init__.py``,
    taken out again afterwards, and the image built back)."""
    out = {"first_s": build_s(image), "rebuild_unchanged_s": build_s(image)}
    original = CHANGED.read_text()
    try:
        CHANGED.write_text(original + "# a change of the code (benchmarks/faults.py)\n")
        out["rebuild_after_a_code_change_s"] = build_s(image)
    finally:
        CHANGED.write_text(original)
    build_s(image)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", nargs="*", default=TESTS, help="the fault tests to run")
    parser.add_argument("--rebuild", action="append", default=[],
                        help="time an unchanged rebuild of this image (repeatable)")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--rebuild-only", action="store_true",
                        help="time the rebuilds only, keeping the fault figures of --out")
    args = parser.parse_args(argv)
    configure_bench_logging()
    before = loadavg()
    if args.rebuild_only:
        doc: dict[str, Any] = json.loads(args.out.read_text())
        code = int(doc.get("tests_exit_code", 0))
        figures = doc.get("faults", {})
    else:
        with tempfile.TemporaryDirectory(prefix="coda-faults-") as tmp:
            report = Path(tmp) / "report.json"
            code = run_tests(report, args.tests)
            figures = json.loads(report.read_text()) if report.exists() else {}
        doc = {"what": "per fault: seconds to give the job back or report the fault, and to "
                       "resume once it is gone; attempts the episode spent (1: none on the "
                       "fault)",
               "tests": args.tests, "tests_exit_code": code, "faults": figures}
    doc["image_tag"] = os.environ.get("CODA_IMAGE_TAG") or "latest"
    if args.rebuild:
        doc["rebuilds"] = {image: rebuild(image) for image in args.rebuild}
        doc["rebuilds_machine"] = machine(before)
    if not args.rebuild_only:
        doc["machine"] = machine(before)
    write_result(args.out, doc)
    log.info("faults.written", path=str(args.out), faults=sorted(figures), exit_code=code)
    if code != 0:
        raise SystemExit(f"the fault tests failed (exit {code}); figures of those that ran "
                         f"are in {args.out}")


if __name__ == "__main__":
    main()
