"""Whole episodes through ``coda worker``: the worker's own time per step and episodes per
minute, with the model services answering from the replay backend (recorded TeXstudio C-02
outputs), so model inference costs ~nothing and every other part is real: the master (its own
Postgres and Redis, configured or embedded), the planner and executor services over HTTP, a
worker process with ``--slots`` local desktops running the real TeXstudio, the task's setup and
checkers.

* ``step_overhead_ms``: median over all steps of the worker's own time per step: the step's
  wall time minus model inference (the services' reported latency) minus the action's own
  effect (the guest acting, the screen settling). What is left: the screenshot, its upload to
  the master, the HTTP calls to the services and their prompt building and image reading, the
  step report. ``step_overhead_ms_p90`` and the median of each part are given beside it;
* ``episodes_per_min``: episodes completed per minute of wall time from submitting the batch
  to its end (desktop start-up, setup, TeXstudio launch and checkers included), with ``--slots``
  slots.

    python -m benchmarks.episodes --episodes 8 --slots 4 --out benchmarks/results/episodes.json
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import (
    configure_bench_logging,
    machine,
    median,
    percentile,
    rounded,
    write_result,
)
from benchmarks.master_load import Master, local_master
from coda.logging import get_logger
from coda.procs import start_process, stop_process
from coda_app.services import ServiceProcess, running_services

ROOT = Path(__file__).resolve().parents[1]
REPLAYS = ROOT / "examples" / "replays"
TASK = ROOT / "examples" / "scienceboard" / "VM" / "TeXstudio" / "C-02.json"
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "episodes.json"
PARTS = ("observe", "upload", "plan", "plan_model", "execute", "execute_model", "act", "settle",
         "report", "total")
log = get_logger("benchmarks.episodes")


@contextmanager
def replay_services(artifacts: Path, work: Path, token: str,
                    replays: str = "texstudio-C-02") -> Iterator[tuple[str, str]]:
    """The planner and executor services answering from ``REPLAYS/<replays>.{planner,
    executor}.json``."""
    from executor_service.settings import ExecutorSettings
    from planner_service.settings import PlannerSettings

    common: dict[str, Any] = {"backend": "replay", "artifacts_url": str(artifacts),
              "inference_tokens": token, "admin_token": "admin-" + secrets.token_hex(16)}
    planner = ServiceProcess.of("planner", PlannerSettings(
        model=str(REPLAYS / f"{replays}.planner.json"),
        adapter_cache_dir=str(work / "adapters"), **common), work / "planner.log")
    executor = ServiceProcess.of("executor", ExecutorSettings(
        model=str(REPLAYS / f"{replays}.executor.json"), **common), work / "executor.log")
    with running_services(planner, executor):
        yield planner.url, executor.url


@contextmanager
def worker_process(master: Master, planner: str, executor: str, token: str, slots: int,
                   log_path: Path, provider: str = "local",
                   provider_options: dict[str, Any] | None = None,
                   log_level: str = "WARNING") -> Iterator[subprocess.Popen[bytes]]:
    env = {"CODA_WORKER_PROVIDER": provider,
           "CODA_WORKER_PROVIDER_OPTIONS": json.dumps(provider_options or {}),
           "CODA_WORKER_MASTER_URL": master.url,
           "CODA_WORKER_TOKEN": master.worker_token, "CODA_WORKER_PLANNER_URL": planner,
           "CODA_WORKER_EXECUTOR_URL": executor, "CODA_WORKER_SERVICE_TOKEN": token,
           "CODA_WORKER_SLOTS": str(slots), "CODA_WORKER_JOB_SLOTS": "0",
           "CODA_WORKER_KINDS": "episode", "CODA_WORKER_LEASE_WAIT_S": "1",
           "CODA_WORKER_LOG_LEVEL": log_level, "CODA_LOG_FORMAT": "json"}
    proc = start_process([sys.executable, "-m", "worker.cli"], env=env, log=log_path, cwd=ROOT)
    try:
        yield proc
    finally:
        stop_process(proc, timeout=60, sig=signal.SIGINT)


def summarize(episodes: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """The figures of finished episodes (pure)."""
    timings = [s["timings"] for e in episodes for s in e["steps"] or [] if s.get("timings")]
    overhead = [t["overhead"] for t in timings]
    done = [e for e in episodes if e["status"] == "completed"]
    return {
        "step_overhead_ms": median(overhead),
        "step_overhead_ms_p90": rounded(percentile(overhead, 90)) or 0.0,
        "step_parts_ms_median": {p: median([t[p] for t in timings]) for p in PARTS},
        "steps": len(timings),
        "episodes": len(episodes),
        "episodes_completed": len(done),
        "episodes_succeeded": sum(1 for e in done if e["success"]),
        "episodes_per_min": round(len(done) / (wall_s / 60), 2) if wall_s > 0 else 0.0,
        "wall_s": round(wall_s, 1),
    }


def measure(episodes: int, slots: int, timeout_s: float = 1800.0,
            record: Path | None = None, provider: str = "local",
            provider_options: dict[str, Any] | None = None, task: Path = TASK,
            replays: str = "texstudio-C-02") -> dict[str, Any]:
    """The figures; ``record``: where a succeeded episode's record (JSON) is written;
    ``provider`` / ``provider_options``: the worker's desktops (``docker``: containers);
    ``task`` run ``episodes`` times, its model outputs replayed from ``replays``
    (:func:`replay_services`)."""
    token = "inference-" + secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="coda-bench-episodes-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)  # embedded Postgres may run as another user
        margs = argparse.Namespace(lease_ttl_s=60.0, workers=1, master_log=work / "master.log")
        with local_master(margs, work) as master, \
                replay_services(work / "artifacts", work, token, replays) as (planner, executor):
            admin = httpx.Client(base_url=master.url, timeout=60, headers={
                "authorization": f"Bearer {master.admin_token}"})
            task_doc = json.loads(task.read_text())
            with worker_process(master, planner, executor, token, slots, work / "worker.log",
                                provider, provider_options):
                started = time.monotonic()
                created = admin.post("/v1/batches", json={
                    "tasks": [task_doc], "rollouts": episodes, "judge": "never"})
                created.raise_for_status()
                batch = created.json()["batch"]["id"]
                deadline = started + timeout_s
                while True:
                    progress = admin.get(f"/v1/batches/{batch}").json()["progress"]
                    finished = progress["completed"] + progress["failed"]
                    if finished >= episodes:
                        break
                    if time.monotonic() > deadline:
                        tail = (work / "worker.log").read_text()[-3000:]
                        raise TimeoutError(f"{finished}/{episodes} episodes after "
                                           f"{timeout_s} s; worker log: {tail}")
                    time.sleep(0.5)
                wall = time.monotonic() - started
            ids = created.json()["episode_ids"]
            eps = [admin.get(f"/v1/episodes/{i}", params={"steps": "true"}).json() for i in ids]
    if record is not None:
        succeeded = [e for e in eps if e["success"]]
        if succeeded:
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps(succeeded[0], indent=1) + "\n")
    return summarize(eps, wall)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--record", type=Path, default=None,
                   help="write a succeeded episode's record (JSON) here")
    args = p.parse_args(argv)
    configure_bench_logging()
    started = time.monotonic()
    before = list(os.getloadavg())
    result = measure(args.episodes, args.slots, record=args.record)
    result["config"] = {"episodes": args.episodes, "slots": args.slots,
                        "task": "TeXstudio/C-02", "models": "replay backend"}
    result["machine"] = machine(before)
    result["seconds"] = round(time.monotonic() - started, 1)
    result["at"] = datetime.now(UTC).isoformat(timespec="seconds")
    write_result(args.out, result)
    log.info("bench.episodes_done", **{k: v for k, v in result.items()
                                      if k in ("step_overhead_ms", "episodes_per_min")})


if __name__ == "__main__":
    main()
