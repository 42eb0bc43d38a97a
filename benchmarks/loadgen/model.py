"""The load model: simulated environment slots that register, lease (long-poll), report steps,
heartbeat and complete like a worker's slots, in one load-generator process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.loadgen.figures import ROUTES, overlap
from benchmarks.loadgen.http import ClientError, HttpxHttp, RawHttp
from coda.clients.base import after_hint
from coda.contracts.master_api import STEP_BATCH_MAX


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
    batched_heartbeats: bool = True  # one call per simulated worker for all its leases
    # > 0: a simulated worker's step reports wait up to this long to go in one call
    # (POST /v1/jobs/steps, as coda worker's StepReporter; a slot waiting for its previous
    # report sends the batch at once); 0: one call per step
    step_window_s: float = 0.0
    shed_retries: int = 8  # a 503 is retried after its Retry-After (plus jitter) this often


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
    shed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROUTES, 0))
    shed_latencies: list[float] = field(default_factory=list)  # how fast a 503 came back

    def drain(self) -> dict[str, Any]:
        """Everything since the last drain, as a picklable message."""
        msg = {"latencies": self.latencies, "errors": self.errors,
               "error_samples": self.error_samples, "held_s": self.held_s,
               "slot_s": self.slot_s, "jobs_completed": self.jobs_completed,
               "lost_leases": self.lost_leases, "shed": self.shed,
               "shed_latencies": self.shed_latencies}
        fresh = Tally()
        self.__dict__.update(fresh.__dict__)
        return msg


@dataclass
class Server:
    """A simulated VM server (one registered worker): the leases its slots hold, kept by one
    batched heartbeat call per period, and those the master answered lost."""

    held: dict[str, str] = field(default_factory=dict)  # job id -> lease token
    lost: set[str] = field(default_factory=set)
    steps: list[tuple[dict[str, Any], asyncio.Future[bool]]] = field(default_factory=list)
    hurry: asyncio.Event = field(default_factory=asyncio.Event)


class Slots:
    """The slots of one load-generator process."""

    def __init__(self, cfg: LoadConfig) -> None:
        self.cfg = cfg
        self.tally = Tally()
        self.stop_at = cfg.window[1]
        self.workers: dict[int, asyncio.Task[str | None]] = {}
        self.servers: dict[int, Server] = {}
        self.beats: list[asyncio.Task[None]] = []

    def connection(self) -> RawHttp | HttpxHttp:
        kind = HttpxHttp if self.cfg.client == "httpx" else RawHttp
        return kind(self.cfg.url, self.cfg.worker_token, self.cfg.timeout_s + self.cfg.wait_s)

    async def call(self, http: RawHttp | HttpxHttp, route: str, path: str,
                   body: dict[str, Any]) -> Any:
        """POST; record latency (inside the window) or an error. A 503 with ``Retry-After``
        (the master shedding load) is counted apart and retried after that long plus jitter,
        as a worker does. The JSON answer (None for an empty one) or ``False`` on error."""
        for attempt in range(self.cfg.shed_retries + 1):
            start_wall, start = time.time(), time.perf_counter()
            try:
                status, payload, hint = await http.post(path, body)
            except ClientError as exc:
                self._error(route, str(exc))
                return False
            ms = (time.perf_counter() - start) * 1000
            measured = self.cfg.window[0] <= start_wall < self.cfg.window[1]
            if status == 503 and hint is not None and attempt < self.cfg.shed_retries:
                if measured:
                    self.tally.shed[route] += 1
                    self.tally.shed_latencies.append(ms)
                await asyncio.sleep(after_hint(float(hint), attempt + 1))  # as workers do
                continue
            if status >= 300:
                self._error(route, f"{status}: {payload[:200].decode(errors='replace')}")
                return False
            if measured:
                self.tally.latencies[route].append(ms)
            return json.loads(payload) if payload else None
        return False  # not reached: the last attempt returns

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
        if got and self.cfg.batched_heartbeats and server not in self.servers:
            self.servers[server] = Server()
            self.beats.append(asyncio.ensure_future(self._keep_leases(server)))
            if self.cfg.step_window_s > 0:
                self.beats.append(asyncio.ensure_future(self._send_steps(server)))
        return str(got["id"]) if got else None

    async def _send_steps(self, server: int) -> None:
        """The server's step reports: what its slots reported, in one call per window (at
        once when a slot waits for its report)."""
        cfg, state = self.cfg, self.servers[server]
        http = self.connection()
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(state.hurry.wait(), cfg.step_window_s)
                state.hurry.clear()
                batch, state.steps = state.steps[:STEP_BATCH_MAX], state.steps[STEP_BATCH_MAX:]
                if not batch:
                    continue
                got = await self.call(http, "steps", "/v1/jobs/steps",
                                      {"reports": [report for report, _ in batch]})
                answers = got["reports"] if got else [{"outcome": "error"}] * len(batch)
                for (report, done), answer in zip(batch, answers, strict=False):
                    if answer["outcome"] == "lost":
                        state.lost.add(report["job_id"])
                    if not done.done():
                        done.set_result(answer["outcome"] == "stored")
        finally:
            for _, done in state.steps:
                if not done.done():
                    done.set_result(False)
            await http.aclose()

    async def _keep_leases(self, server: int) -> None:
        """The server's lease keeping: every ``heartbeat_s``, one call for all its leases."""
        cfg, state = self.cfg, self.servers[server]
        http = self.connection()
        try:
            await asyncio.sleep(cfg.heartbeat_s * ((server * 0.6180339887) % 1.0))
            while time.time() < self.stop_at:
                leases = list(state.held.items())
                if leases:
                    got = await self.call(http, "heartbeats", "/v1/jobs/heartbeat", {"leases": [
                        {"job_id": j, "lease_token": t} for j, t in leases]})
                    for beat in got["leases"] if got else []:
                        if beat["outcome"] == "lost" and beat["job_id"] in state.held:
                            state.lost.add(beat["job_id"])
                await asyncio.sleep(cfg.heartbeat_s)
        finally:
            await http.aclose()

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
            outcome = await self.episode(http, job, length,
                                         self.servers.get(slot // cfg.slots_per_worker))
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

    async def episode(self, http: RawHttp | HttpxHttp, job: dict[str, Any], length: float,
                      server: Server | None = None) -> str:
        """Steps and heartbeats for ``length`` seconds, then complete: completed, lost (the
        lease or the completion failed) or stopped (the run ended while the job ran). With a
        ``server``, its batched heartbeats keep the lease (no heartbeat of this slot's own)."""
        if server is None:
            return await self._episode(http, job, length, None)
        server.held[job["id"]] = job["lease_token"]
        try:
            return await self._episode(http, job, length, server)
        finally:
            server.held.pop(job["id"], None)
            server.lost.discard(job["id"])

    async def _episode(self, http: RawHttp | HttpxHttp, job: dict[str, Any], length: float,
                       server: Server | None) -> str:
        cfg = self.cfg
        base, token = f"/v1/jobs/{job['id']}", job["lease_token"]
        start = time.time()
        end = start + length
        next_step, index = start + cfg.step_s, 0
        next_hb = start + cfg.heartbeat_s if server is None else float("inf")
        batched = server is not None and cfg.step_window_s > 0
        previous: asyncio.Future[bool] | None = None  # the last step report (batched)
        while True:
            due = min(next_step, next_hb, end)
            if due > self.stop_at:
                return "stopped"  # the run is over while this job runs: leave it
            await _sleep_until(due)
            if due >= end:
                break
            if due == next_step:
                step = {"index": index, "thought": "simulated step",
                        "action": {"type": "click", "x": 10 + index, "y": 20},
                        "latency_ms": 1500.0}
                if batched:
                    assert server is not None
                    await _landed(previous, server)  # as a worker's slot does
                    previous = asyncio.get_running_loop().create_future()
                    server.steps.append(({"job_id": job["id"], "lease_token": token,
                                          "step": step}, previous))
                    ok = True
                else:
                    ok = await self.call(http, "step", f"{base}/steps",
                                         {"lease_token": token, "step": step})
                index, next_step = index + 1, next_step + cfg.step_s
            else:
                ok = await self.call(http, "heartbeat", f"{base}/heartbeat",
                                     {"lease_token": token})
                next_hb += cfg.heartbeat_s
            if server is not None and job["id"] in server.lost:
                self.tally.lost_leases += 1
                return "lost"
            if ok is False and server is None and await self._lost(http, base, token):
                return "lost"
        if batched:
            assert server is not None
            await _landed(previous, server)  # the last report lands before the completion
        done = await self.call(http, "complete", f"{base}/complete", {
            "lease_token": token, "kind": "episode",
            "result": {"success": index % 2 == 0, "steps": index}})
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


async def _landed(report: asyncio.Future[bool] | None, server: Server) -> None:
    """Wait for a batched step report, sending its batch at once if it still waits."""
    if report is not None and not report.done():
        server.hurry.set()
        await report


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
    for beat in slots.beats:
        beat.cancel()
    await asyncio.gather(*slots.beats, return_exceptions=True)
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
