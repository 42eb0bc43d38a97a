"""Failover and rolling upgrade of a VM server, as measured by the fleet test on the real engine.

``python -m benchmarks.fleet`` runs ``tests/deploy/test_fleet.py`` (the server stack of
docker-compose.yml and three VM servers of deploy/compose/vm-server.yml, one master; see its
docstring) with ``CODA_FLEET_REPORT`` set, and writes the test's own recorded measurements
under two keys of ``benchmarks/results/fleet.json`` (:func:`benchmarks.common.write_result_key`;
the other keys are other benchmarks'):

* ``failover``: a VM server's worker killed (``docker kill``) mid-episode under a 10 s lease TTL
  and 2 s heartbeats: seconds from the kill until its episode is back in the queue
  (``requeued_after_kill_s``) and until another VM server leased it (``re_leased_after_kill_s``:
  includes waiting for a free slot), episodes lost and doubled, judge jobs per episode.
* ``rolling_upgrade``: a VM server drained with ``stop`` (SIGTERM, 20 s drain grace) while it
  runs an episode: the drain's wall time, episodes finished in the grace and re-queued, lost.

``--report FILE`` (repeatable) takes the figures of a run already made
(``CODA_FLEET_REPORT=FILE pytest tests/deploy/test_fleet.py``), ``--runs N`` makes N more runs;
each time is the median over the runs and each count the worst run's, beside every run's
value, with the load average before and after each run (the machine is shared). Needs the engine
(``bash scripts/docker-engine.sh start``) and the images (``scripts/docker-build.sh``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (
    configure_bench_logging,
    loadavg,
    machine,
    median,
    write_result_key,
)
from coda.logging import get_logger

log = get_logger("coda.bench.fleet")
ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "fleet.json"
TEST = "tests/deploy/test_fleet.py"


def engine_versions() -> str:
    """The engine and compose versions the run used."""
    server = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                            capture_output=True, text=True, check=False).stdout.strip()
    compose = subprocess.run(["docker-compose", "version", "--short"], capture_output=True,
                             text=True, check=False).stdout.strip()
    return f"docker {server or '?'}, docker-compose {compose or '(docker compose)'}"


def run_test(report: Path) -> None:
    """Run the fleet test module with its report written to ``report``."""
    env = {**os.environ, "CODA_FLEET_REPORT": str(report)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                           TEST], cwd=ROOT, env=env, check=False)
    if proc.returncode != 0 or not report.exists():
        raise SystemExit(f"{TEST} failed (exit {proc.returncode}): no figures written")


FAILOVER = {"time_to_requeue_s": "requeued_after_kill_s",
            "time_to_re_lease_s": "re_leased_after_kill_s", "episodes_lost": "episodes_lost",
            "episodes_doubled": "episodes_doubled",
            "judge_jobs_per_episode": "judge_jobs_per_episode",
            "killed_episode_attempts": "killed_episode_attempts",
            "stale_desktops_removed_on_return": "stale_desktops_removed"}
UPGRADE = {"drain_s": "drain_s", "episodes_finished_in_grace": "finished_in_grace",
           "episodes_requeued": "episodes_requeued", "episodes_lost": "episodes_lost",
           "episodes_doubled": "episodes_doubled"}


def summary(runs: list[dict[str, Any]], fields: dict[str, str]) -> dict[str, Any]:
    """Each figure over the runs: seconds (``*_s``) as the median, counts as the worst run's
    (the largest), and every run's value."""
    out: dict[str, Any] = {}
    for name, source in fields.items():
        values = [r[source] for r in runs]
        out[name] = median(values, 1) if name.endswith("_s") else max(values)
        out[f"{name}_runs"] = values
    return out


def documents(reports: list[dict[str, Any]], context: dict[str, Any]
              ) -> dict[str, dict[str, Any]]:
    """The ``failover`` and ``rolling_upgrade`` documents of the runs' figures."""
    loads = [{k: r.get(k) for k in ("loadavg_before", "loadavg_after")} for r in reports]
    failover = [r["failover"] for r in reports]
    upgrade = [r["rolling_upgrade"] for r in reports]
    return {
        "failover": {
            "what": "one of three VM servers' worker killed (docker kill) while its episode "
                    "(TeXstudio C-02, replay models) runs; its lease expires and the two "
                    "others roll the episode out; then up -d brings it back. time_to_re_lease "
                    "includes waiting for a free slot on the others (1 slot per server)",
            **context, "runs": len(reports), "load_per_run": loads,
            "lease_ttl_s": failover[0]["lease_ttl_s"], "heartbeat_s": failover[0]["heartbeat_s"],
            **summary(failover, FAILOVER),
        },
        "rolling_upgrade": {
            "what": "one of three VM servers drained (docker-compose stop: SIGTERM) while its "
                    "episode runs, brought up again on a new worker image tag (rejoins as a "
                    "new registration)",
            **context, "runs": len(reports), "load_per_run": loads,
            "drain_grace_s": upgrade[0]["drain_grace_s"], **summary(upgrade, UPGRADE),
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, action="append", default=[],
                        help="figures of a run already made (CODA_FLEET_REPORT of the test); "
                             "repeatable")
    parser.add_argument("--runs", type=int, default=None,
                        help="runs of the test to make (default: 1 without --report, else 0)")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    configure_bench_logging()
    before = loadavg()
    reports = [json.loads(path.read_text()) for path in args.report]
    runs = args.runs if args.runs is not None else (0 if reports else 1)
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(runs):
            report = Path(tmp) / f"fleet-report-{n}.json"
            run_test(report)
            reports.append(json.loads(report.read_text()))
    if not reports:
        raise SystemExit("no run: give --report FILE or --runs N")
    context = {"date": dt.date.today().isoformat(), "engine": engine_versions(),
               "source": f"{TEST} (its recorded measurements)",
               "machine": machine(before)}
    for key, doc in documents(reports, context).items():
        write_result_key(args.out, key, doc)
        log.info("fleet.figures", key=key, **{k: v for k, v in doc.items()
                                              if k not in ("what", "machine", "load_per_run")})


if __name__ == "__main__":
    main()
