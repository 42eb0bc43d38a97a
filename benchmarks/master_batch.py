"""Does a large batch stall the master? Probes /healthz, a lease and a heartbeat while a
10,000-task batch is submitted, and while one with a duplicate id is refused.

``python -m benchmarks.master_batch --tasks 10000 --out benchmarks/results/master_batch.json``

A master is started here (as in :mod:`benchmarks.master_load`: configured stores through
``DATABASE_URL`` / ``REDIS_URL``, or embedded ones). A probe thread calls, one after the other
and without pause, ``GET /healthz``, ``POST /v1/jobs/lease`` (a kind with no ready job, so it
answers at once) and ``POST /v1/jobs/{id}/heartbeat`` (a lease held for the run); the main
thread submits real ScienceBoard task documents (``examples/scienceboard``, cycled with unique
ids) as one batch, then the same number plus one duplicate id (refused with 422). The request
bodies are encoded before the clock starts. Figures: each submission's wall time and the probe
latencies (max, p99, p50 per route) while it was in flight.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import percentile, rounded, write_result
from benchmarks.master_load import Master, local_master
from coda.logging import configure_logging, get_logger
from coda.tasks import load_tasks

log = get_logger("coda.bench.master_batch")
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "scienceboard"


def task_documents(n: int, *, duplicate: bool = False) -> list[dict[str, Any]]:
    """``n`` real ScienceBoard documents with unique ids (plus one repeated id if asked)."""
    natives = [t.to_native() for t in load_tasks(EXAMPLES)]
    tag = secrets.token_hex(3)
    docs = [{**natives[i % len(natives)], "id": f"bench-{tag}-{i}"} for i in range(n)]
    if duplicate:
        docs.append(dict(docs[0]))
    return docs


class Prober(threading.Thread):
    """Calls the three probe routes in turn until stopped; keeps (start, route, ms, status)."""

    def __init__(self, master: Master, worker_id: str, job: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.master, self.worker_id, self.job = master, worker_id, job
        self.samples: list[tuple[float, str, float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.master.worker_token}"}
        calls = [
            ("healthz", "GET", "/healthz", None),
            ("lease", "POST", "/v1/jobs/lease",
             {"worker_id": self.worker_id, "kind": "judge", "capacity": 1}),
            ("heartbeat", "POST", f"/v1/jobs/{self.job['id']}/heartbeat",
             {"lease_token": self.job["lease_token"]}),
        ]
        with httpx.Client(base_url=self.master.url, headers=headers, timeout=60) as c:
            while not self.stop.is_set():
                for route, method, path, body in calls:
                    t = time.monotonic()
                    status = c.request(method, path, json=body).status_code
                    self.samples.append((t, route, (time.monotonic() - t) * 1000, status))

    def during(self, start: float, end: float) -> dict[str, Any]:
        """Figures of the probes that started in [start, end] (or were in flight at start)."""
        out: dict[str, Any] = {}
        for route in ("healthz", "lease", "heartbeat"):
            ms = [lat for t, r, lat, _ in self.samples
                  if r == route and start <= t + lat / 1000 and t <= end]
            bad = sum(1 for t, r, _, st in self.samples
                      if r == route and start <= t <= end and st >= 400)
            out[route] = {"requests": len(ms), "errors": bad,
                          "max_ms": rounded(max(ms) if ms else None, 1),
                          "p99_ms": rounded(percentile(ms, 99), 1),
                          "p50_ms": rounded(percentile(ms, 50), 1)}
        return out


def _submit(master: Master, body: bytes) -> tuple[float, float, int, str]:
    headers = {"Authorization": f"Bearer {master.admin_token}",
               "Content-Type": "application/json"}
    t0 = time.monotonic()
    resp = httpx.post(f"{master.url}/v1/batches", content=body, headers=headers, timeout=600)
    return t0, time.monotonic(), resp.status_code, resp.text[:300]


def _held_lease(master: Master) -> tuple[str, dict[str, Any]]:
    admin = {"Authorization": f"Bearer {master.admin_token}"}
    worker = {"Authorization": f"Bearer {master.worker_token}"}
    with httpx.Client(base_url=master.url, timeout=60) as c:
        wid = c.post("/v1/workers", json={"name": "bench-prober"}, headers=worker).json()["id"]
        c.post("/v1/batches", json={"name": "probe", "tasks": task_documents(1)},
               headers=admin).raise_for_status()
        [job] = c.post("/v1/jobs/lease", json={"worker_id": wid}, headers=worker).json()["jobs"]
    return wid, job


def measure(master: Master, tasks: int) -> dict[str, Any]:
    ok_body = json.dumps({"name": "big", "tasks": task_documents(tasks)}).encode()
    dup_body = json.dumps({"name": "dup", "tasks": task_documents(tasks,
                                                                 duplicate=True)}).encode()
    wid, job = _held_lease(master)
    prober = Prober(master, wid, job)
    prober.start()
    time.sleep(2.0)  # idle probes first: the baseline
    idle = prober.during(time.monotonic() - 1.5, time.monotonic())
    results: dict[str, Any] = {"idle": idle}
    for name, body in (("submit", ok_body), ("duplicate_refused", dup_body)):
        t0, t1, status, text = _submit(master, body)
        time.sleep(0.5)
        results[name] = {"status": status, "seconds": round(t1 - t0, 2),
                         "body_mib": round(len(body) / 2**20, 1),
                         "probes": prober.during(t0, t1)}
        if status >= 500:
            results[name]["response"] = text
        log.info("bench.submission_measured", what=name, status=status, seconds=round(t1 - t0, 2),
                 healthz_max_ms=results[name]["probes"]["healthz"]["max_ms"],
                 heartbeat_max_ms=results[name]["probes"]["heartbeat"]["max_ms"])
    prober.stop.set()
    prober.join(timeout=60)
    return results


def main(argv: list[str] | None = None) -> int:
    configure_logging("INFO")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=10_000, help="tasks in the big batch")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/master_batch.json")
    p.add_argument("--label", default="", help="a note kept in the JSON (e.g. before/after)")
    args = p.parse_args(argv)
    opts = argparse.Namespace(workers=1, lease_ttl_s=120.0, master_log=None)
    with tempfile.TemporaryDirectory(prefix="coda-bench-") as tmp, \
            local_master(opts, Path(tmp)) as master:
        doc = {"label": args.label, "tasks": args.tasks, **measure(master, args.tasks)}
    write_result(args.out, doc)
    log.info("bench.batch_done", out=str(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
