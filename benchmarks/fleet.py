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

``--report FILE`` takes the figures of a run already made (``CODA_FLEET_REPORT=FILE pytest
tests/deploy/test_fleet.py``) instead of running the test again. Needs the engine
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

from benchmarks.common import configure_bench_logging, loadavg, machine, write_result_key
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


def documents(figures: dict[str, Any], context: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``failover`` and ``rolling_upgrade`` documents of one run's figures."""
    failover = figures["failover"]
    upgrade = figures["rolling_upgrade"]
    return {
        "failover": {
            "what": "one of three VM servers' worker killed (docker kill) while its episode "
                    "(TeXstudio C-02, replay models) runs; its lease expires and the two "
                    "others roll the episode out; then up -d brings it back",
            **context,
            "lease_ttl_s": failover["lease_ttl_s"], "heartbeat_s": failover["heartbeat_s"],
            "time_to_requeue_s": failover["requeued_after_kill_s"],
            "time_to_re_lease_s": failover["re_leased_after_kill_s"],
            "episodes_lost": failover["episodes_lost"],
            "episodes_doubled": failover["episodes_doubled"],
            "judge_jobs_per_episode": failover["judge_jobs_per_episode"],
            "killed_episode_attempts": failover["killed_episode_attempts"],
            "stale_desktops_removed_on_return": failover["stale_desktops_removed"],
        },
        "rolling_upgrade": {
            "what": "one of three VM servers drained (docker-compose stop: SIGTERM) while its "
                    "episode runs, brought up again on a new worker image tag (rejoins as a "
                    "new registration)",
            **context,
            "drain_grace_s": upgrade["drain_grace_s"], "drain_s": upgrade["drain_s"],
            "episodes_finished_in_grace": upgrade["finished_in_grace"],
            "episodes_requeued": upgrade["episodes_requeued"],
            "episodes_lost": upgrade["episodes_lost"],
            "episodes_doubled": upgrade["episodes_doubled"],
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, default=None,
                        help="figures of a run already made (CODA_FLEET_REPORT of the test)")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    configure_bench_logging()
    before = loadavg()
    if args.report is None:
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "fleet-report.json"
            run_test(report)
            figures = json.loads(report.read_text())
    else:
        figures = json.loads(args.report.read_text())
    context = {"date": dt.date.today().isoformat(), "engine": engine_versions(),
               "source": f"{TEST} (its recorded measurements)",
               "machine": machine(before)}
    for key, doc in documents(figures, context).items():
        write_result_key(args.out, key, doc)
        log.info("fleet.figures", key=key, **{k: v for k, v in doc.items()
                                              if k not in ("what", "machine")})


if __name__ == "__main__":
    main()
