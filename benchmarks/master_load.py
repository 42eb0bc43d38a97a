"""Load benchmark of the master: N simulated environment slots over real HTTP.

``python -m benchmarks.master_load --slots 1000 --duration 60 --out benchmarks/results/x.json``

Unless ``--url`` is given, a master is started here (uvicorn subprocess, ``--workers``) on the
configured stores (``DATABASE_URL`` / ``REDIS_URL``: a throwaway database is created on that
server and dropped afterwards, a random Redis key prefix is used and its keys deleted) or on
embedded Postgres/Redis (:func:`coda.embedded.embedded_services`). Enough episodes are submitted
that slots never starve. ``--procs`` load-generator processes each run an asyncio loop with one
``httpx.AsyncClient`` and their share of the slots. Workers (VM servers) register with
``--slots-per-worker`` slots each; every slot leases one episode (long-poll), reports a step
every ``--step-s`` and heartbeats its lease every ``--heartbeat-s`` for ``--episode-s``, then
completes it and leases again. Slot starts are spread over ``--ramp-s`` and first episodes get
staggered lengths, so the request rate is smooth. Latencies, errors and utilisation are measured
after the warm-up (``--warmup-s``, at least the ramp) for ``--duration`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import queue as queue_mod
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from coda.logging import configure_logging, get_logger
from coda.procs import free_port, start_ready, stop_process

log = get_logger("coda.bench.master_load")
ROOT = Path(__file__).resolve().parents[1]
ROUTES = ("register", "lease", "heartbeat", "step", "complete")
ROUTE_PATHS = {
    "register": "POST /v1/workers",
    "lease": "POST /v1/jobs/lease",
    "heartbeat": "POST /v1/jobs/{job_id}/heartbeat",
    "step": "POST /v1/jobs/{job_id}/steps",
    "complete": "POST /v1/jobs/{job_id}/complete",
}


# ---------------------------------------------------------------------------------- figures


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]) of unsorted values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def overlap(start: float, end: float, lo: float, hi: float) -> float:
    """Length of [start, end] inside [lo, hi]."""
    return max(0.0, min(end, hi) - max(start, lo))


def route_figures(latencies_ms: list[float], errors: int, window_s: float) -> dict[str, Any]:
    return {
        "requests": len(latencies_ms),
        "requests_per_s": round(len(latencies_ms) / window_s, 2) if window_s > 0 else 0.0,
        "errors": errors,
        "p50_ms": _round(percentile(latencies_ms, 50)),
        "p90_ms": _round(percentile(latencies_ms, 90)),
        "p99_ms": _round(percentile(latencies_ms, 99)),
        "max_ms": _round(max(latencies_ms) if latencies_ms else None),
        "mean_ms": _round(sum(latencies_ms) / len(latencies_ms) if latencies_ms else None),
    }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 2)


# ------------------------------------------------------------------------------ load slots


@dataclass(frozen=True)
class LoadConfig:
    url: str
    worker_token: str
    slots: list[int]  # global slot indices this process runs
    total_slots: int
    t0: float  # wall clock (time.time) when slot 0 starts
    ramp_s: float
    window: tuple[float, float]  # wall-clock measurement window
    episode_s: float
    step_s: float
    heartbeat_s: float
    wait_s: float
    slots_per_worker: int
    timeout_s: float
    client: str = "raw"
    report_every_s: float = 2.0


@dataclass
class Tally:
    """What one process measured (latencies only inside the window; errors always)."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in ROUTES})
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    error_samples: list[str] = field(default_factory=list)
    held_s: float = 0.0  # slot-seconds holding a job inside the window
    slot_s: float = 0.0  # slot-seconds inside the window
    jobs_completed: int = 0
    lost_leases: int = 0

    def drain(self) -> dict[str, Any]:
        """Everything since the last drain, as a picklable message."""
        msg = {"latencies": self.latencies, "errors": self.errors,
               "error_samples": self.error_samples, "held_s": self.held_s,
               "slot_s": self.slot_s, "jobs_completed": self.jobs_completed,
               "lost_leases": self.lost_leases}
        fresh = Tally()
        self.__dict__.update(fresh.__dict__)
        return msg


class ClientError(Exception):
    """A request did not get an HTTP response (connection or timeout)."""


class RawHttp:
    """One keep-alive HTTP/1.1 connection (asyncio streams): a slot's own connection, with a
    fraction of a general client's CPU cost so the generator does not become the bottleneck."""

    def __init__(self, url: str, token: str, timeout_s: float) -> None:
        parts = httpx.URL(url)
        self.host, self.port = parts.host, parts.port or 80
        self.head = (f"Host: {self.host}:{self.port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\n").encode()
        self.timeout_s = timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        request = b"".join((f"POST {path} HTTP/1.1\r\n".encode(), self.head,
                            f"Content-Length: {len(data)}\r\n\r\n".encode(), data))
        try:
            return await asyncio.wait_for(self._exchange(request), self.timeout_s)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
            await self.aclose()
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        if self.writer is None or self.writer.is_closing() or (
                self.reader is not None and self.reader.at_eof()):
            await self.aclose()
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None and self.writer is not None
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        if "content-length" in headers:
            payload = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            payload = await self._chunked()
        else:
            payload = b""
        if headers.get("connection") == "close":
            await self.aclose()
        return status, payload

    async def _chunked(self) -> bytes:
        assert self.reader is not None
        out: list[bytes] = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await self.reader.readexactly(size + 2)
            if size == 0:
                return b"".join(out)
            out.append(chunk[:-2])

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
        self.reader = self.writer = None


class HttpxHttp:
    """The same interface over ``httpx.AsyncClient`` (one client per slot: a pool of many
    connections costs httpx a scan of all of them per request)."""

    def __init__(self, url: str, token: str, timeout_s: float) -> None:
        self.client = httpx.AsyncClient(base_url=url, timeout=timeout_s,
                                        headers={"Authorization": f"Bearer {token}"})

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        try:
            resp = await self.client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc
        return resp.status_code, resp.content

    async def aclose(self) -> None:
        await self.client.aclose()


class Slots:
    """The slots of one load-generator process."""

    def __init__(self, cfg: LoadConfig) -> None:
        self.cfg = cfg
        self.tally = Tally()
        self.stop_at = cfg.window[1]
        self.workers: dict[int, asyncio.Task[str | None]] = {}

    def connection(self) -> RawHttp | HttpxHttp:
        kind = HttpxHttp if self.cfg.client == "httpx" else RawHttp
        return kind(self.cfg.url, self.cfg.worker_token, self.cfg.timeout_s + self.cfg.wait_s)

    async def call(self, http: RawHttp | HttpxHttp, route: str, path: str,
                   body: dict[str, Any]) -> Any:
        """POST; record latency (inside the window) or an error. The JSON answer (None for an
        empty one) or ``False`` on error."""
        start_wall, start = time.time(), time.perf_counter()
        try:
            status, payload = await http.post(path, body)
        except ClientError as exc:
            self._error(route, str(exc))
            return False
        ms = (time.perf_counter() - start) * 1000
        if status >= 300:
            self._error(route, f"{status}: {payload[:200].decode(errors='replace')}")
            return False
        if self.cfg.window[0] <= start_wall < self.cfg.window[1]:
            self.tally.latencies[route].append(ms)
        return json.loads(payload) if payload else None

    def _error(self, route: str, what: str) -> None:
        self.tally.errors[route] += 1
        if len(self.tally.error_samples) < 5:
            self.tally.error_samples.append(f"{route}: {what}")

    async def worker_id(self, http: RawHttp | HttpxHttp, slot: int) -> str | None:
        """One registration per VM server (``slots_per_worker`` slots), shared by its slots."""
        server = slot // self.cfg.slots_per_worker
        if server not in self.workers:
            self.workers[server] = asyncio.ensure_future(self._register(http, server))
        return await self.workers[server]

    async def _register(self, http: RawHttp | HttpxHttp, server: int) -> str | None:
        got = await self.call(http, "register", "/v1/workers", {
            "name": f"bench-vm-{server}", "host": f"10.0.{server // 250}.{server % 250}",
            "slots": self.cfg.slots_per_worker})
        return str(got["id"]) if got else None

    async def run_slot(self, slot: int) -> None:
        http = self.connection()
        try:
            await self._run_slot(http, slot)
        finally:
            await http.aclose()

    async def _run_slot(self, http: RawHttp | HttpxHttp, slot: int) -> None:
        cfg = self.cfg
        await _sleep_until(cfg.t0 + cfg.ramp_s * slot / max(1, cfg.total_slots))
        worker = None
        while worker is None and time.time() < self.stop_at:
            worker = await self.worker_id(http, slot)
            if worker is None:
                self.workers.pop(slot // cfg.slots_per_worker, None)
                await asyncio.sleep(1.0)
        # the first episode has a staggered length so completions spread evenly
        phase = ((slot * 0.6180339887) % 1.0) or 0.5
        length = max(cfg.step_s, cfg.episode_s * phase)
        while time.time() < self.stop_at:
            job = await self.lease(http, worker)
            if job is None:
                continue
            held_from = time.time()
            outcome = await self.episode(http, job, length)
            self._held(held_from, self.stop_at if outcome == "stopped" else time.time())
            self.tally.jobs_completed += outcome == "completed"
            if outcome == "stopped":
                break
            length = cfg.episode_s
        self._slot_window()

    async def lease(self, http: RawHttp | HttpxHttp, worker: str | None) -> dict[str, Any] | None:
        got = await self.call(http, "lease", "/v1/jobs/lease", {
            "worker_id": worker, "capacity": 1, "wait_s": self.cfg.wait_s})
        if got is False:
            await asyncio.sleep(1.0)
            return None
        return got["jobs"][0] if got["jobs"] else None

    async def episode(self, http: RawHttp | HttpxHttp, job: dict[str, Any], length: float) -> str:
        """Steps and heartbeats for ``length`` seconds, then complete: completed, lost (the
        lease or the completion failed) or stopped (the run ended while the job ran)."""
        cfg = self.cfg
        base, token = f"/v1/jobs/{job['id']}", job["lease_token"]
        start = time.time()
        end = start + length
        next_step, next_hb, index = start + cfg.step_s, start + cfg.heartbeat_s, 0
        while True:
            due = min(next_step, next_hb, end)
            if due > self.stop_at:
                return "stopped"  # the run is over while this job runs: leave it
            await _sleep_until(due)
            if due >= end:
                break
            if due == next_step:
                ok = await self.call(http, "step", f"{base}/steps", {"lease_token": token, "step": {
                    "index": index, "thought": "simulated step",
                    "action": {"type": "click", "x": 10 + index, "y": 20},
                    "latency_ms": 1500.0}})
                index, next_step = index + 1, next_step + cfg.step_s
            else:
                ok = await self.call(http, "heartbeat", f"{base}/heartbeat",
                                     {"lease_token": token})
                next_hb += cfg.heartbeat_s
            if ok is False and await self._lost(http, base, token):
                return "lost"
        done = await self.call(http, "complete", f"{base}/complete", {
            "lease_token": token, "result": {"success": index % 2 == 0, "steps": index}})
        return "lost" if done is False else "completed"

    async def _lost(self, http: RawHttp | HttpxHttp, base: str, token: str) -> bool:
        """After an error: is the lease gone (then drop the job)?"""
        if await self.call(http, "heartbeat", f"{base}/heartbeat",
                           {"lease_token": token}) is False:
            self.tally.lost_leases += 1
            return True
        return False

    def _held(self, start: float, end: float) -> None:
        self.tally.held_s += overlap(start, min(end, self.stop_at), *self.cfg.window)

    def _slot_window(self) -> None:
        self.tally.slot_s += self.cfg.window[1] - self.cfg.window[0]


async def _sleep_until(wall: float) -> None:
    delay = wall - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


async def _load_main(cfg: LoadConfig, out: Any) -> None:
    slots = Slots(cfg)
    tasks = [asyncio.create_task(slots.run_slot(s)) for s in cfg.slots]
    hard_stop = cfg.window[1] + cfg.timeout_s + cfg.wait_s + 5  # then abandon stragglers
    while not all(t.done() for t in tasks):
        await asyncio.wait(tasks, timeout=cfg.report_every_s)
        if time.time() > hard_stop:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        out.put(("tally", slots.tally.drain()))
    for t in tasks:
        if not t.cancelled() and t.exception() is not None:
            out.put(("crash", repr(t.exception())))
    out.put(("done", slots.tally.drain()))


def load_process(cfg: LoadConfig, out: Any) -> None:
    """Entry point of one load-generator process."""
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_load_main(cfg, out))


# ------------------------------------------------------------------------------ the master


@dataclass
class Master:
    url: str
    admin_token: str
    worker_token: str
    proc: subprocess.Popen[bytes] | None = None


@contextlib.contextmanager
def scratch_database(database_url: str) -> Iterator[str]:
    """A fresh database on the server of ``database_url`` (dropped afterwards)."""
    import asyncpg

    from coda.embedded import to_plain_postgres_url

    plain = to_plain_postgres_url(database_url)
    name = f"coda_bench_{secrets.token_hex(4)}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(plain)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f'create database "{name}"'))
    head, _, _ = database_url.rpartition("/")
    try:
        yield f"{head}/{name}"
    finally:
        asyncio.run(admin(f'drop database if exists "{name}" with (force)'))


def _delete_prefix(redis_url: str, prefix: str) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    try:
        keys = list(r.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            r.delete(*keys)
    finally:
        r.close()


@contextlib.contextmanager
def local_master(args: argparse.Namespace, work: Path) -> Iterator[Master]:
    """Stores (configured or embedded) + a uvicorn master subprocess."""
    from coda.embedded import embedded_services

    with embedded_services(work / "stores") as urls:
        db_cm = (scratch_database(urls.database_url) if os.environ.get("DATABASE_URL")
                 else contextlib.nullcontext(urls.database_url))
        prefix = f"coda-bench-{secrets.token_hex(4)}"
        with db_cm as database_url:
            port = free_port()
            master = Master(url=f"http://127.0.0.1:{port}",
                            admin_token="admin-" + secrets.token_hex(16),
                            worker_token="worker-" + secrets.token_hex(16))
            env = {"CODA_DATABASE_URL": database_url,
                   "CODA_REDIS_URL": urls.redis_url, "CODA_REDIS_PREFIX": prefix,
                   "CODA_ADMIN_TOKEN": master.admin_token,
                   "CODA_WORKER_TOKENS": master.worker_token,
                   "CODA_ARTIFACTS_URL": str(work / "artifacts"), "CODA_LOG_LEVEL": "WARNING",
                   "CODA_LEASE_TTL_S": str(args.lease_ttl_s)}
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
                _delete_prefix(urls.redis_url, prefix)


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

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return float(sum(getattr(t, k, 0.0) for k in ("user", "system", "nice", "irq",
                                                       "softirq", "steal")))

    def begin(self) -> None:
        self.start, self.start_busy, self.wall = self._groups(), self._busy(), time.monotonic()

    def end(self) -> dict[str, Any]:
        now, wall = self._groups(), time.monotonic() - self.wall
        used = {g: round(sum(v - self.start.get(g, {}).get(pid, 0.0) for pid, v in pids.items()),
                         2) for g, pids in now.items()}
        used["machine_busy"] = round(self._busy() - self.start_busy, 2)
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

    def add(self, msg: dict[str, Any]) -> None:
        for r in ROUTES:
            self.latencies[r].extend(msg["latencies"][r])
            self.errors[r] += msg["errors"][r]
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
        "routes": {ROUTE_PATHS[r]: route_figures(agg.latencies[r], agg.errors[r], duration_s)
                   for r in ROUTES},
        **extra,
    }


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
    p.add_argument("--client", choices=("raw", "httpx"), default="raw",
                   help="raw: one keep-alive HTTP/1.1 connection per slot on asyncio streams; "
                        "httpx: one httpx.AsyncClient per slot (more client CPU)")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
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
            log.info("episodes submitted", episodes=need, batches=len(batch_ids),
                     seconds=round(time.monotonic() - t, 1))
            try:
                doc = drive(args, master, ramp=ramp, warmup=warmup)
            finally:
                cancel_batches(master, batch_ids)
    doc["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k not in ("admin_token", "worker_token")}
    doc["config"].update(ramp_s=ramp, warmup_s=warmup, episodes_submitted=need)
    return doc


def drive(args: argparse.Namespace, master: Master, *, ramp: float,
          warmup: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs_n = max(1, min(args.procs, args.slots))
    t0 = time.time() + 3.0 + 0.5 * procs_n  # spawned interpreters import first
    window = (t0 + warmup, t0 + warmup + args.duration)
    procs = []
    for i in range(procs_n):
        cfg = LoadConfig(url=master.url, worker_token=master.worker_token,
                         slots=list(range(i, args.slots, procs_n)), total_slots=args.slots,
                         t0=t0, ramp_s=ramp, window=window, episode_s=args.episode_s,
                         step_s=args.step_s, heartbeat_s=args.heartbeat_s, wait_s=args.wait_s,
                         slots_per_worker=args.slots_per_worker, timeout_s=args.timeout_s,
                         client=args.client)
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
    log.info("load progress", phase=phase, elapsed_s=round(now - t0, 1),
             measured_requests=len(every), p50_ms=_round(percentile(every, 50)),
             p99_ms=_round(percentile(every, 99)), errors=sum(agg.errors.values()),
             jobs_completed=agg.jobs_completed)


def main(argv: list[str] | None = None) -> int:
    configure_logging("INFO")
    args = _parser().parse_args(argv)
    if args.url and not args.worker_token and not os.environ.get("CODA_WORKER_TOKENS"):
        raise SystemExit("--url needs --worker-token (or CODA_WORKER_TOKENS) and --admin-token")
    doc = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    log.info("load benchmark done", out=str(args.out), slots=doc["slots"],
             requests_per_s=doc["requests_per_s"], p50_ms=doc["p50_ms"], p99_ms=doc["p99_ms"],
             errors=doc["errors"], utilization=doc["utilization"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
