"""The load harness: submit and cancel the episodes, spawn the load-generator processes,
meter CPU, aggregate their tallies into the result document."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import queue as queue_mod
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
import psutil

from benchmarks.common import machine_busy_s
from benchmarks.loadgen.figures import ROUTE_PATHS, ROUTES, percentile, rounded, route_figures
from benchmarks.loadgen.model import LoadConfig, load_process
from coda.logging import get_logger

log = get_logger("coda.bench.master_load")


class Master(Protocol):
    """The master under load (``benchmarks.master_load.Master`` starts one)."""

    url: str
    admin_token: str
    worker_token: str
    proc: subprocess.Popen[bytes] | None

def submit_episodes(master: Master, n: int, per_batch: int = 2000) -> list[str]:
    """Submit at least ``n`` synthetic episodes (tasks x rollouts); returns the batch ids."""
    rollouts = 20
    batch_ids = []
    made = 0
    with httpx.Client(base_url=master.url, timeout=120,
                      headers={"Authorization": f"Bearer {master.admin_token}"}) as c:
        while made < n:
            tasks = max(1, min(per_batch, n - made) // rollouts)
            tag = secrets.token_hex(3)
            body = {"name": f"load-{tag}", "rollouts": rollouts, "tasks": [
                {"id": f"bench-{tag}-{i}", "app": "Bench", "instruction": "synthetic load task",
                 "step_budget": 15} for i in range(tasks)]}
            resp = c.post("/v1/batches", json=body)
            resp.raise_for_status()
            batch_ids.append(resp.json()["batch"]["id"])
            made += tasks * rollouts
    return batch_ids


def cancel_batches(master: Master, batch_ids: list[str]) -> None:
    with httpx.Client(base_url=master.url, timeout=120,
                      headers={"Authorization": f"Bearer {master.admin_token}"}) as c:
        for b in batch_ids:
            with contextlib.suppress(httpx.HTTPError):
                c.post(f"/v1/batches/{b}/cancel")


# --------------------------------------------------------------------------------- CPU time


def _cpu_by_pid(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
    return out


def _family(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def _named(*prefixes: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith(prefixes)]


@dataclass
class CpuMeter:
    """CPU seconds of the master, the load generators and the stores over the window (per
    process: alive at the end, minus its time at the start; processes that exited meanwhile
    are not counted)."""

    master_pid: int | None
    load_pids: list[int]
    start: dict[str, dict[int, float]] = field(default_factory=dict)
    start_busy: float = 0.0
    wall: float = 0.0

    def _groups(self) -> dict[str, dict[int, float]]:
        return {
            "master": _cpu_by_pid(_family(self.master_pid) if self.master_pid else []),
            "load_generators": _cpu_by_pid([p for pid in self.load_pids for p in _family(pid)]),
            "postgres": _cpu_by_pid(_named("postgres")),
            "redis": _cpu_by_pid(_named("redis-server")),
        }

    def begin(self) -> None:
        self.start, self.start_busy, self.wall = self._groups(), machine_busy_s(), time.monotonic()

    def end(self) -> dict[str, Any]:
        now, wall = self._groups(), time.monotonic() - self.wall
        used = {g: round(sum(v - self.start.get(g, {}).get(pid, 0.0) for pid, v in pids.items()),
                         2) for g, pids in now.items()}
        used["machine_busy"] = round(machine_busy_s() - self.start_busy, 2)
        used["other_processes"] = round(max(0.0, used["machine_busy"] - sum(
            used[g] for g in now)), 2)
        return {"window_s": round(wall, 2), "cpu_s": used,
                "cores_used": {k: round(v / wall, 3) for k, v in used.items()},
                "machine_cores": psutil.cpu_count()}


# ------------------------------------------------------------------------------ aggregation


@dataclass
class Aggregate:
    latencies: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in ROUTES})
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    error_samples: list[str] = field(default_factory=list)
    held_s: float = 0.0
    slot_s: float = 0.0
    jobs_completed: int = 0
    lost_leases: int = 0
    crashes: list[str] = field(default_factory=list)
    shed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    shed_latencies: list[float] = field(default_factory=list)

    def add(self, msg: dict[str, Any]) -> None:
        for r in ROUTES:
            self.latencies[r].extend(msg["latencies"][r])
            self.errors[r] += msg["errors"][r]
            self.shed[r] += msg["shed"][r]
        self.shed_latencies.extend(msg["shed_latencies"])
        self.error_samples.extend(msg["error_samples"][: max(0, 10 - len(self.error_samples))])
        self.held_s += msg["held_s"]
        self.slot_s += msg["slot_s"]
        self.jobs_completed += msg["jobs_completed"]
        self.lost_leases += msg["lost_leases"]

    def all_latencies(self) -> list[float]:
        return [v for r in ROUTES for v in self.latencies[r]]


def summarize(agg: Aggregate, *, slots: int, duration_s: float,
              extra: dict[str, Any]) -> dict[str, Any]:
    """The result document (pure)."""
    every = agg.all_latencies()
    overall = route_figures(every, sum(agg.errors.values()), duration_s)
    return {
        "slots": slots,
        "duration_s": duration_s,
        "requests": overall["requests"],
        "requests_per_s": overall["requests_per_s"],
        "p50_ms": overall["p50_ms"],
        "p90_ms": overall["p90_ms"],
        "p99_ms": overall["p99_ms"],
        "max_ms": overall["max_ms"],
        "errors": overall["errors"],
        "error_samples": agg.error_samples,
        "utilization": round(agg.held_s / agg.slot_s, 4) if agg.slot_s else 0.0,
        "jobs_completed": agg.jobs_completed,
        "lost_leases": agg.lost_leases,
        "load_process_crashes": agg.crashes,
        "routes": {ROUTE_PATHS[r]: {**route_figures(agg.latencies[r], agg.errors[r],
                                                    duration_s), "shed": agg.shed[r]}
                   for r in ROUTES},
        # 503 + Retry-After answers (the master shedding load), each retried after its hint:
        # not errors, and not in the latencies above (those are of admitted requests)
        "shed": sum(agg.shed.values()),
        "shed_per_s": round(sum(agg.shed.values()) / duration_s, 2) if duration_s else 0.0,
        "shed_p99_ms": rounded(percentile(agg.shed_latencies, 99)),
        **extra,
    }


def drive(args: argparse.Namespace, master: Master, *, ramp: float,
          warmup: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    servers = -(-args.slots // max(1, args.slots_per_worker))
    procs_n = max(1, min(args.procs, servers))
    t0 = time.time() + 3.0 + 0.5 * procs_n  # spawned interpreters import first
    window = (t0 + warmup, t0 + warmup + args.duration)
    procs = []
    spw = max(1, args.slots_per_worker)
    for i in range(procs_n):  # a VM server's slots in one process (its batched heartbeats)
        mine = [s for s in range(args.slots) if (s // spw) % procs_n == i]
        cfg = LoadConfig(url=master.url, worker_token=master.worker_token,
                         slots=mine, total_slots=args.slots,
                         t0=t0, ramp_s=ramp, window=window, episode_s=args.episode_s,
                         step_s=args.step_s, heartbeat_s=args.heartbeat_s, wait_s=args.wait_s,
                         slots_per_worker=args.slots_per_worker, timeout_s=args.timeout_s,
                         client=args.client, batched_heartbeats=args.heartbeats == "batched",
                         step_window_s=getattr(args, "step_window_s", 0.0))
        p = ctx.Process(target=load_process, args=(cfg, out), daemon=True)
        p.start()
        procs.append(p)
    meter = CpuMeter(master.proc.pid if master.proc else None, [p.pid or 0 for p in procs])
    agg, done = Aggregate(), 0
    metered = finished_meter = False
    cpu: dict[str, Any] = {}
    last_log = 0.0
    while done < procs_n:
        now = time.time()
        if not metered and now >= window[0]:
            meter.begin()
            metered = True
        if metered and not finished_meter and now >= window[1]:
            cpu, finished_meter = meter.end(), True
        try:
            kind, msg = out.get(timeout=0.5)
        except queue_mod.Empty:
            if not any(p.is_alive() for p in procs):
                break
            continue
        if kind == "crash":
            agg.crashes.append(msg)
        else:
            agg.add(msg)
            done += kind == "done"
        if time.monotonic() - last_log > 5:
            last_log = time.monotonic()
            _progress(agg, now, t0, window)
    for p in procs:
        p.join(timeout=10)
    if not cpu and metered:
        cpu = meter.end()
    return summarize(agg, slots=args.slots, duration_s=args.duration,
                     extra={"cpu": cpu, "url": master.url,
                            "master_workers": None if args.url else args.workers,
                            "load_processes": procs_n})


def _progress(agg: Aggregate, now: float, t0: float, window: tuple[float, float]) -> None:
    every = agg.all_latencies()
    phase = "warm-up" if now < window[0] else ("measuring" if now < window[1] else "stopping")
    log.info("bench.load_progress", phase=phase, elapsed_s=round(now - t0, 1),
             measured_requests=len(every), p50_ms=rounded(percentile(every, 50)),
             p99_ms=rounded(percentile(every, 99)), errors=sum(agg.errors.values()),
             shed=sum(agg.shed.values()), jobs_completed=agg.jobs_completed)
