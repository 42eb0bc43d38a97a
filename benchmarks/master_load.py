"""Load benchmark of the master: N simulated environment slots over real HTTP.

``python -m benchmarks.master_load --slots 1000 --duration 60 --out benchmarks/results/x.json``

Unless ``--url`` is given, a master is started here (uvicorn subprocess, ``--workers``) on the
configured stores (``DATABASE_URL`` / ``REDIS_URL``: a throwaway database is created on that
server and dropped afterwards, a random Redis key prefix is used and its keys deleted) or on
embedded Postgres/Redis (:func:`coda_app.embedded.embedded_services`). Enough episodes are submitted
that slots never starve. ``--procs`` load-generator processes each run an asyncio loop with one
``httpx.AsyncClient`` and their share of the slots. Workers (VM servers) register with
``--slots-per-worker`` slots each; every slot leases one episode (long-poll), reports a step
every ``--step-s`` for ``--episode-s``, then completes it and leases again; every simulated
worker heartbeats all its slots' leases in one call every ``--heartbeat-s`` (as ``coda worker``
does; ``--heartbeats per-job``: one call per lease) and sends its slots' step reports in one
call per ``--step-window-s`` (as ``coda worker``'s step reports; ``0``: one call per step).
A 503 with ``Retry-After`` (the master shedding load) is counted apart (``shed``) and retried
after that long plus jitter, as a worker does; the latencies are those of the admitted
requests. Slot starts are spread over ``--ramp-s`` and first episodes get staggered lengths,
so the request rate is smooth. Latencies, errors and utilisation are measured after the
warm-up (``--warmup-s``, at least the ramp) for ``--duration`` seconds.

The issue-25 runs (``--fleet-key`` puts their figures under ``master_scale`` of
``benchmarks/results/fleet.json``; see docs/fleet.md): 10,000 slots at the paper's cadence
(``--slots 10000 --step-s 10 --heartbeat-s 10 --episode-s 150``) and an overload run.

This module starts the master and parses the command line; the load model, its HTTP clients
and the harness that measures a run are in :mod:`benchmarks.loadgen`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import machine, write_result, write_result_key
from benchmarks.loadgen.harness import cancel_batches, drive, submit_episodes
from coda.logging import configure_logging, get_logger
from coda.procs import free_port, start_ready, stop_process

log = get_logger("coda.bench.master_load")
ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------ the master


@dataclass
class Master:
    url: str
    admin_token: str
    worker_token: str
    proc: subprocess.Popen[bytes] | None = None


@contextlib.contextmanager
def local_master(args: argparse.Namespace, work: Path) -> Iterator[Master]:
    """Stores (configured or embedded) + a uvicorn master subprocess."""
    from coda_app.embedded.services import private_stores

    with private_stores(work / "stores", prefix="coda-bench") as stores:
        port = free_port()
        master = Master(url=f"http://127.0.0.1:{port}",
                        admin_token="admin-" + secrets.token_hex(16),
                        worker_token="worker-" + secrets.token_hex(16))
        env = {"CODA_DATABASE_URL": stores.database_url,
               "CODA_REDIS_URL": stores.redis_url, "CODA_REDIS_PREFIX": stores.redis_prefix,
               "CODA_ADMIN_TOKEN": master.admin_token,
               "CODA_WORKER_TOKENS": master.worker_token,
               "CODA_ARTIFACTS_URL": str(work / "artifacts"), "CODA_LOG_LEVEL": "WARNING",
               "CODA_LEASE_TTL_S": str(args.lease_ttl_s), **master_settings(args)}
        cmd = [sys.executable, "-m", "uvicorn", "master.app:create_app", "--factory",
               "--host", "127.0.0.1", "--port", str(port), "--workers", str(args.workers),
               "--log-level", "warning", "--no-access-log", "--backlog", "4096",
               "--timeout-keep-alive", "30"]
        log_path = args.master_log or work / "master.log"
        master.proc = start_ready(cmd, f"{master.url}/readyz", name="master", env=env,
                                  log=log_path, cwd=ROOT, timeout=90.0)
        try:
            yield master
        finally:
            stop_process(master.proc, timeout=30)


def master_settings(args: argparse.Namespace) -> dict[str, str]:
    """``--master-env KEY=VALUE`` options: settings of the started master (none when the
    calling benchmark has no such option: episodes, capacity, master_batch)."""
    out = {}
    for item in getattr(args, "master_env", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("CODA_"):
            raise SystemExit(f"--master-env {item!r}: expected CODA_SETTING=value")
        out[key] = value
    return out


# ---------------------------------------------------------------------------- fleet.json

FLEET_KEY = "master_scale"


def fleet_figures(doc: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run as ``fleet.json`` keeps them (the full document is ``--out``)."""
    cfg = doc["config"]
    return {
        "slots": doc["slots"], "master_processes": doc["master_workers"],
        "cadence": {k: cfg.get(k) for k in ("step_s", "heartbeat_s", "episode_s",
                                            "slots_per_worker", "heartbeats", "step_window_s")},
        "master_settings": cfg["master_env"], "duration_s": doc["duration_s"],
        "requests_per_s": doc["requests_per_s"], "p50_ms": doc["p50_ms"],
        "p90_ms": doc["p90_ms"], "p99_ms": doc["p99_ms"], "max_ms": doc["max_ms"],
        "errors": doc["errors"], "shed": doc["shed"], "shed_per_s": doc["shed_per_s"],
        "shed_p99_ms": doc["shed_p99_ms"], "utilization": doc["utilization"],
        "jobs_completed": doc["jobs_completed"], "lost_leases": doc["lost_leases"],
        "step_calls_per_s": sum(doc["routes"].get(r, {}).get("requests_per_s", 0.0) for r in (
            "POST /v1/jobs/steps", "POST /v1/jobs/{job_id}/steps")),
        "heartbeat_calls_per_s": sum(doc["routes"][r]["requests_per_s"] for r in (
            "POST /v1/jobs/heartbeat", "POST /v1/jobs/{job_id}/heartbeat")),
        "cores_used": doc.get("cpu", {}).get("cores_used"), "machine": doc["machine"],
        "out": cfg["out"],
    }


def write_fleet(path: Path, name: str, doc: dict[str, Any]) -> None:
    """Put this run's figures under ``master_scale.<name>`` of the shared ``fleet.json``."""
    current: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(ValueError):
            loaded = json.loads(path.read_text()).get(FLEET_KEY)
            current = loaded if isinstance(loaded, dict) else {}
    current[name] = fleet_figures(doc)
    write_result_key(path, FLEET_KEY, dict(sorted(current.items())))


# ------------------------------------------------------------------------------------ main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slots", type=int, default=1000, help="environment slots simulated")
    p.add_argument("--duration", type=float, default=60.0, help="measured seconds")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/master_load.json")
    p.add_argument("--url", help="an already running master (else one is started here)")
    p.add_argument("--admin-token", default=os.environ.get("CODA_ADMIN_TOKEN"))
    p.add_argument("--worker-token", default=None,
                   help="with --url (default: first of CODA_WORKER_TOKENS)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--procs", type=int, default=2, help="load-generator processes")
    p.add_argument("--slots-per-worker", type=int, default=10, help="slots per VM server")
    p.add_argument("--episode-s", type=float, default=20.0, help="simulated episode length")
    p.add_argument("--step-s", type=float, default=2.0, help="step report period")
    p.add_argument("--heartbeat-s", type=float, default=5.0, help="lease heartbeat period")
    p.add_argument("--wait-s", type=float, default=5.0, help="lease long-poll time")
    p.add_argument("--ramp-s", type=float, default=None,
                   help="slot starts spread over this (default: min(10, episode-s))")
    p.add_argument("--warmup-s", type=float, default=None,
                   help="unmeasured start (default: ramp + 5 s)")
    p.add_argument("--master-log", type=Path, default=None,
                   help="keep the started master's output here (default: a temporary file)")
    p.add_argument("--lease-ttl-s", type=float, default=60.0, help="master lease TTL")
    p.add_argument("--timeout-s", type=float, default=30.0, help="client request timeout")
    p.add_argument("--heartbeats", choices=("batched", "per-job"), default="batched",
                   help="batched: one POST /v1/jobs/heartbeat per simulated worker for all its "
                        "leases (as coda worker does); per-job: one call per lease")
    p.add_argument("--step-window-s", type=float, default=5.0,
                   help="with batched heartbeats, a simulated worker's step reports wait up to "
                        "this long to go in one POST /v1/jobs/steps (as coda worker's default "
                        "CODA_WORKER_STEP_REPORT_WINDOW_S); 0: one POST /v1/jobs/{id}/steps "
                        "per step")
    p.add_argument("--master-env", action="append", default=[], metavar="CODA_X=VALUE",
                   help="a setting of the started master (repeatable), e.g. "
                        "CODA_SHED_MAX_IN_FLIGHT=0 to turn load shedding off")
    p.add_argument("--fleet-key", default=None,
                   help="also write this run's figures under master_scale.<NAME> of --fleet")
    p.add_argument("--fleet", type=Path, default=ROOT / "benchmarks/results/fleet.json")
    p.add_argument("--client", choices=("raw", "httpx"), default="raw",
                   help="raw: one keep-alive HTTP/1.1 connection per slot on asyncio streams; "
                        "httpx: one httpx.AsyncClient per slot (more client CPU)")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    before = os.getloadavg()
    ramp = args.ramp_s if args.ramp_s is not None else min(10.0, args.episode_s)
    warmup = args.warmup_s if args.warmup_s is not None else ramp + 5.0
    with tempfile.TemporaryDirectory(prefix="coda-bench-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)  # embedded Postgres may run as another user
        if args.url:
            token = args.worker_token or os.environ.get("CODA_WORKER_TOKENS", "").split(",")[0]
            cm: contextlib.AbstractContextManager[Master] = contextlib.nullcontext(
                Master(url=args.url, admin_token=args.admin_token or "", worker_token=token))
        else:
            cm = local_master(args, work)
        with cm as master:
            total = args.duration + warmup + 10
            need = int(args.slots * (total / args.episode_s + 2) * 1.2) + 100
            t = time.monotonic()
            batch_ids = submit_episodes(master, need)
            log.info("bench.episodes_submitted", episodes=need, batches=len(batch_ids),
                     seconds=round(time.monotonic() - t, 1))
            try:
                doc = drive(args, master, ramp=ramp, warmup=warmup)
            finally:
                cancel_batches(master, batch_ids)
    doc["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k not in ("admin_token", "worker_token", "master_env")}
    doc["config"].update(ramp_s=ramp, warmup_s=warmup, episodes_submitted=need,
                         master_env=master_settings(args))
    doc["machine"] = machine(before)
    return doc


def main(argv: list[str] | None = None) -> int:
    configure_logging("INFO")
    args = _parser().parse_args(argv)
    if args.url and not args.worker_token and not os.environ.get("CODA_WORKER_TOKENS"):
        raise SystemExit("--url needs --worker-token (or CODA_WORKER_TOKENS) and --admin-token")
    master_settings(args)  # refuse a malformed --master-env before starting anything
    doc = run(args)
    write_result(args.out, doc)
    if args.fleet_key:
        write_fleet(args.fleet, args.fleet_key, doc)
    log.info("bench.load_done", out=str(args.out), slots=doc["slots"],
             requests_per_s=doc["requests_per_s"], p50_ms=doc["p50_ms"], p99_ms=doc["p99_ms"],
             errors=doc["errors"], shed=doc["shed"], utilization=doc["utilization"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
