"""``coda worker``: async slots that lease jobs from the master and run them.

Each desktop slot leases ``episode`` jobs and runs them on its own desktop; each job slot leases
``judge`` and ``group`` jobs (no desktop). A running job's lease is kept by heartbeats (one
batched call for all of the worker's leases, :mod:`worker.leases`); a lease the master took
back stops the job. On SIGTERM the worker stops leasing, lets running jobs
finish for ``drain_grace_s`` and then gives the rest back to the master for requeue.

Infrastructure faults do not burn work. A desktop provider that cannot make desktops
(:class:`~coda.contracts.desktop.ProviderDown`: unreachable, credentials refused, template or
image missing) gives the job back without counting its attempt and closes the desktop slots'
gate (:mod:`worker.gate`) until a probe passes; a desktop that breaks is still the episode's
attempt. Every call to the master retries a master that is away for up to
``master_patience_s`` (below its lease TTL), so a master restart costs no running episode its
attempt. Another worker using this worker's desktop names
(:class:`~worker.providers.base.ProviderConflict`) stops it: it never touches desktops it does
not own.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from coda.bounds import MAX_ERROR_TEXT
from coda.clients.base import ServiceError, after_hint
from coda.clients.executor import ExecutorClient
from coda.clients.judge import JudgeClient
from coda.clients.master import MasterClient
from coda.clients.planner import PlannerClient
from coda.contracts.desktop import BrokenReason, ProviderDown, ProviderFault
from coda.contracts.jobs import EpisodeJob, Job, JobResult, JudgeJob
from coda.contracts.master_api import WorkerRegister
from coda.contracts.records import JobKind
from coda.logging import get_logger
from worker.episode import AttemptFailed, EpisodeRun, lease_lost
from worker.followups import JobRefused, run_group, run_judge
from worker.gate import ProviderGate
from worker.history import storable
from worker.leases import LeaseGone, LeaseKeeper
from worker.providers.base import Provider, ProviderConflict
from worker.settings import WorkerSettings
from worker.steps import StepReporter
from worker.tokens import secret_value

log = get_logger("worker.runner")

FOLLOWUP_KINDS = (JobKind.JUDGE, JobKind.GROUP)


class TokenRefused(RuntimeError):
    """The master answered 401/403 to a lease: this worker's token was revoked (or is not a
    worker token). The worker stops leasing and ends with this error."""


class Worker:
    """``await Worker(settings, provider).run(stop_event)``."""

    def __init__(self, settings: WorkerSettings, provider: Provider[Any]) -> None:
        self.settings = settings
        self.provider = provider
        s = settings
        token = secret_value(s.service_token)
        self.master = MasterClient(s.master_url, token=s.token.get_secret_value(),
                                   timeout=s.master_timeout_s + s.lease_wait_s,
                                   patience_s=s.master_patience_s or None)
        self.planner = PlannerClient(s.planner_url, token=token, timeout=s.model_timeout_s)
        self.executor = ExecutorClient(s.executor_url, token=token, timeout=s.model_timeout_s)
        self.judge = JudgeClient(s.judge_url, token=token, timeout=s.model_timeout_s)
        self.pool = ThreadPoolExecutor(max_workers=max(4, 2 * s.slots + 2),
                                       thread_name_prefix="desktop")
        self.worker_id: uuid.UUID | None = None
        self.stopping = asyncio.Event()
        self.refused: str | None = None  # the master refused our token (401/403): why
        self.running: dict[uuid.UUID, asyncio.Task[Any]] = {}
        self.leases = LeaseKeeper(self.master, s.heartbeat_interval_s)
        self.reporter = StepReporter(self.master, s.step_report_window_s)
        self.completed: dict[JobKind, int] = dict.fromkeys(JobKind, 0)
        self.failed: dict[JobKind, int] = dict.fromkeys(JobKind, 0)
        self.given_back = 0  # jobs given back uncounted for the provider's faults
        self.conflict: str | None = None  # another worker uses our desktop names: why
        self._beat_now = asyncio.Event()
        self.gate = ProviderGate(self._probe, probe_first_s=s.provider_probe_s,
                                 probe_max_s=s.provider_probe_max_s,
                                 on_change=self._beat_now.set)

    # lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Register, run the slots until ``stop`` is set, drain, close."""
        try:
            if not await self._register(stop):
                return
            slots = [asyncio.create_task(self._slot([JobKind.EPISODE], n), name=f"slot-{n}")
                     for n in range(self.settings.slots) if JobKind.EPISODE in self.settings.kinds]
            kinds = [k for k in FOLLOWUP_KINDS if k in self.settings.kinds]
            if kinds:
                slots += [asyncio.create_task(self._slot(kinds, None), name=f"job-slot-{n}")
                          for n in range(self.settings.job_slots)]
            beat = asyncio.create_task(self._worker_heartbeats(), name="worker-heartbeat")
            keeper = asyncio.create_task(self.leases.run(), name="lease-heartbeats")
            reports = asyncio.create_task(self.reporter.run(), name="step-reports")
            gate = (asyncio.create_task(self.gate.run(self.stopping), name="provider-gate")
                    if self._desktops() else None)
            log.info("worker.started", worker=str(self.worker_id), slots=self.settings.slots,
                     job_slots=self.settings.job_slots, provider=self.settings.provider,
                     kinds=[k.value for k in self.settings.kinds])
            waits = {asyncio.create_task(stop.wait()), asyncio.create_task(self.stopping.wait())}
            _, idle = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in idle:
                task.cancel()
            await self._drain(slots)
            helpers = [beat, keeper, reports] + ([gate] if gate is not None else [])
            for helper in helpers:
                helper.cancel()
            # through gather: the heartbeats' CancelledError comes back as a value, while a
            # cancel of this task is still raised (and so is an error of the heartbeats)
            for ended in await asyncio.gather(*helpers, return_exceptions=True):
                if isinstance(ended, Exception):
                    raise ended
        finally:
            await self.aclose()
        if self.refused is not None:  # the master refused our token: say so by the exit
            raise TokenRefused(self.refused)
        if self.conflict is not None:  # another worker uses our desktop names
            raise ProviderConflict(self.conflict)

    def _desktops(self) -> bool:
        return self.settings.slots > 0 and JobKind.EPISODE in self.settings.kinds

    async def _register(self, stop: asyncio.Event) -> bool:
        delay = 0.5
        while not stop.is_set():
            try:
                w = await self.master.register_worker(WorkerRegister(
                    name=self.settings.name, host=socket.gethostname()[:200],
                    slots=max(1, self.settings.slots + self.settings.job_slots),
                    kinds=self.settings.kinds))
                self.worker_id = w.id
                return True
            except (httpx.TransportError, ServiceError) as exc:
                if isinstance(exc, ServiceError) and exc.status in (401, 403):
                    self._refused(exc)
                    raise TokenRefused(str(exc.detail)) from None
                if isinstance(exc, ServiceError) and exc.status == 422:
                    raise
                log.warning("worker.master_unreachable", url=self.settings.master_url,
                            error=str(exc), retry_in_s=delay)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(delay * 2, 10.0)
        return False

    async def _drain(self, slots: list[asyncio.Task[Any]]) -> None:
        self.stopping.set()
        busy = len(self.running)
        log.info("worker.draining", running=busy, grace_s=self.settings.drain_grace_s)
        _, pending = await asyncio.wait(slots, timeout=self.settings.drain_grace_s) \
            if slots else (set(), set())
        cut_short = len(self.running)  # jobs still running (the idle slots are no jobs)
        for task in pending:  # past the grace period: their attempts are reported to retry
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        log.info("worker.stopped", finished_in_grace=busy - cut_short, cut_short=cut_short,
                 completed={k.value: v for k, v in self.completed.items()})

    async def aclose(self) -> None:
        for client in (self.master, self.planner, self.executor, self.judge):
            await client.aclose()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.pool, self.provider.close)
        self.pool.shutdown(wait=False)

    # slots -------------------------------------------------------------------------------

    async def _slot(self, kinds: list[JobKind], slot: int | None) -> None:
        turn = 0
        while not self.stopping.is_set():
            if slot is not None and not await self.gate.wait_open(self.stopping):
                break  # a desktop slot leases only while its provider can make desktops
            kind = kinds[turn % len(kinds)]
            turn += 1
            job = await self._lease(kind, wait_s=self.settings.lease_wait_s / len(kinds))
            if job is None:
                continue
            await self._run_job(job, slot)

    async def _await_service(self, name: str) -> None:
        """Wait (at most ``service_wait_s``) until the model service ``name`` is ready again."""
        client = {"planner": self.planner, "executor": self.executor, "judge": self.judge}[name]
        deadline = time.monotonic() + self.settings.service_wait_s
        delay = 1.0
        log.info("worker.service_waiting", service=name)
        while not self.stopping.is_set() and time.monotonic() < deadline:
            try:
                if (await client.http.get("/readyz")).status_code == 200:
                    log.info("worker.service_ready", service=name)
                    return
            except httpx.HTTPError:
                pass
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), delay)
            delay = min(delay * 2, 10.0)
        log.warning("worker.service_wait_over", service=name)

    async def _lease(self, kind: JobKind, wait_s: float) -> Job | None:
        assert self.worker_id is not None
        lease = asyncio.create_task(self.master.lease(self.worker_id, kind, wait_s=wait_s))
        stop = asyncio.create_task(self.stopping.wait())
        done, _ = await asyncio.wait({lease, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if lease not in done:
            lease.cancel()  # stopping: a job claimed meanwhile expires and is requeued
            # its outcome, never raised (a cancellation of this task still is)
            [outcome] = await asyncio.gather(lease, return_exceptions=True)
            if isinstance(outcome, list) and outcome:
                log.warning("worker.lease_dropped", kind=kind.value, jobs=len(outcome))
            elif isinstance(outcome, Exception):
                log.warning("worker.lease_failed", kind=kind.value,
                            error=f"{type(outcome).__name__}: {outcome}")
            return None
        try:
            jobs = lease.result()
        except (httpx.TransportError, ServiceError) as exc:
            if isinstance(exc, ServiceError) and exc.status in (401, 403):
                self._refused(exc)  # our token was revoked: lease no more
                return None
            # an overloaded master says how long to stay away (503 + Retry-After)
            hint = exc.retry_after if isinstance(exc, ServiceError) else None
            pause = max(2.0, after_hint(hint)) if hint is not None else 2.0
            log.warning("worker.lease_failed", kind=kind.value, error=str(exc),
                        retry_in_s=round(pause, 2))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), pause)
            return None
        return jobs[0] if jobs else None

    def _refused(self, exc: ServiceError) -> None:
        """The master refuses our token (revoked, or not one of its worker tokens): lease no
        more, say so once, and stop (running jobs end; their leases were given back)."""
        if self.refused is None:
            self.refused = str(exc.detail)
            log.error("worker.token_refused", status=exc.status, detail=str(exc.detail)[:300],
                      action="leasing stopped: give this worker a valid CODA_WORKER_TOKEN "
                      "and start it again")
        self.stopping.set()

    async def _probe(self) -> None:
        """One probe of the provider (in a thread), for the gate: a conflict over our desktop
        names stops the worker; an error the provider did not type is taken for its
        infrastructure's, and logged with its traceback."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.pool, self.provider.probe)
        except ProviderDown:
            raise
        except ProviderConflict as exc:
            self._conflicted(exc)
            raise ProviderDown(ProviderFault.MISCONFIGURED, BrokenReason.START_FAILED,
                               str(exc)) from exc
        except Exception as exc:  # a probe's top: logged (a bug), the gate stays closed
            log.exception("worker.provider_probe_failed")
            raise ProviderDown(ProviderFault.UNREACHABLE, BrokenReason.START_FAILED,
                               f"probe: {type(exc).__name__}: {exc}") from exc

    def _conflicted(self, exc: ProviderConflict) -> None:
        """Another worker uses our desktop names: lease no more and stop (never touching its
        desktops)."""
        if self.conflict is None:
            self.conflict = str(exc)
            log.error("worker.provider_conflict", detail=str(exc)[:1000],
                      action="stopping: this worker never touches desktops it does not own")
        self.stopping.set()

    def _handler(self, job: Job, slot: int | None,
                 ) -> Callable[[], Coroutine[Any, Any, JobResult]]:
        if isinstance(job, EpisodeJob):
            assert slot is not None

            async def episode() -> JobResult:
                loop = asyncio.get_running_loop()
                desktop = await loop.run_in_executor(self.pool, self.provider.desktop, slot)
                return await EpisodeRun(
                    job=job, desktop=desktop, master=self.master, planner=self.planner,
                    executor=self.executor, settings=self.settings, pool=self.pool,
                    reporter=self.reporter).run()

            return episode
        if isinstance(job, JudgeJob):
            return lambda: run_judge(job, master=self.master, judge=self.judge,
                                     settings=self.settings)
        return lambda: run_group(job, master=self.master, planner=self.planner,
                                 executor=self.executor, settings=self.settings)

    async def _run_job(self, job: Job, slot: int | None) -> None:
        started = time.monotonic()
        down: str | None = None  # a model service the attempt failed for: wait for it after
        work: asyncio.Task[JobResult] = asyncio.create_task(self._handler(job, slot)())
        self.running[job.id] = work
        lost = self.leases.hold(job, work)  # one batched heartbeat keeps every lease
        try:
            try:
                result = await work
            except asyncio.CancelledError:
                if lost.is_set():
                    raise LeaseGone("the master took the lease back") from None
                raise
            await self.master.complete(job, storable(result))
            self.completed[job.kind] += 1
            log.info("job.completed", job=str(job.id), kind=job.kind.value, attempt=job.attempt,
                     seconds=round(time.monotonic() - started, 3))
        except LeaseGone as exc:
            log.warning("job.lease_lost", job=str(job.id), kind=job.kind.value, detail=str(exc))
        except ProviderDown as exc:  # the infrastructure's fault: not the episode's attempt
            await self._give_back(job, f"provider_down: {exc.fault.value}: {exc.detail}")
            self.gate.down(exc, given_back=True)
        except ProviderConflict as exc:
            await self._give_back(job, f"provider_conflict: {exc}")
            self._conflicted(exc)
        except AttemptFailed as exc:
            await self._fail(job, f"{exc.reason}: {exc.detail}", retry=exc.retry)
            down = exc.service
        except JobRefused as exc:
            await self._fail(job, f"refused: {exc}", retry=False)
        except asyncio.CancelledError:
            # drain grace over (or the worker was killed politely): give the job back
            await asyncio.shield(self._fail(job, "worker_stopping: the worker stopped before "
                                                 "the job finished", retry=True))
            raise
        except ServiceError as exc:
            if lease_lost(exc, self.settings.master_url):
                log.warning("job.lease_lost", job=str(job.id), kind=job.kind.value,
                            detail=str(exc))
            else:
                await self._fail(job, f"service_error: {exc}", retry=exc.status >= 500)
        except Exception as exc:  # a bug or an unexpected answer: the attempt fails, we go on
            log.exception("job.crashed", job=str(job.id), kind=job.kind.value)
            await self._fail(job, f"worker_error: {type(exc).__name__}: {exc}", retry=True)
        finally:
            self.leases.drop(job.id)
            self.running.pop(job.id, None)
        if slot is not None and self.gate.is_open:
            self.gate.confirmed()  # not given back: its desktop was made
        if down is not None:  # the job is given back: its lease is no longer kept meanwhile
            await self._await_service(down)

    async def _give_back(self, job: Job, reason: str) -> None:
        """Give the job back without counting its attempt (the master requeues it)."""
        self.given_back += 1
        log.warning("job.given_back", job=str(job.id), kind=job.kind.value,
                    attempt=job.attempt, reason=reason[:500])
        try:
            await self.master.release(job, reason[:2000])
        except (ServiceError, httpx.TransportError) as exc:  # the lease expiry requeues it
            log.warning("job.give_back_not_reported", job=str(job.id), error=str(exc)[:300])

    async def _fail(self, job: Job, error: str, *, retry: bool) -> None:
        self.failed[job.kind] += 1
        log.warning("job.failed", job=str(job.id), kind=job.kind.value, attempt=job.attempt,
                    error=error[:500], retry=retry)
        try:
            await self.master.fail(job, error[:MAX_ERROR_TEXT], retry=retry)
        except (ServiceError, httpx.TransportError) as exc:  # the lease expiry will requeue it
            log.warning("job.fail_not_reported", job=str(job.id), error=str(exc))

    async def _worker_heartbeats(self) -> None:
        """Every ``heartbeat_interval_s``, and at once when the provider's state changes."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), self.settings.heartbeat_interval_s)
            self._beat_now.clear()
            assert self.worker_id is not None
            try:
                await self.master.worker_heartbeat(
                    self.worker_id, busy_slots=len(self.running),
                    provider=self.gate.state if self._desktops() else None)
            except ServiceError as exc:
                if exc.status == 404:  # the master forgot us (a new database): register again
                    await self._register(asyncio.Event())
                else:
                    log.warning("worker.heartbeat_failed", error=str(exc))
            except httpx.TransportError as exc:
                log.warning("worker.heartbeat_failed", error=str(exc))
