"""The step reports of all a worker's slots, sent in one batched call (``POST /v1/jobs/steps``)
every ``window_s`` instead of one call per step: a VM server whose 8 slots step every 10 s
makes a call every few seconds, not 8 every 10 s. Every step report goes this way; with
``window_s`` 0 each is sent at once (a batch of one, or of what is pending then).

A report waits at most ``window_s`` for company. A slot that needs its report landed (its next
step, the end of its attempt) says so (:meth:`StepReporter.hurry`) and the batch goes at once,
so a slot never waits for the window: batching only delays reports nobody waits for yet. A
report the master answers ``lost`` raises :class:`~worker.leases.LeaseGone`, one it answers
``refused`` :class:`~worker.leases.StepRefused` (a kind of it), so the episode stops on it.
"""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from pydantic import ValidationError

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.jobs import Job
from coda.contracts.master_api import STEP_BATCH_MAX, StepReportOutcome
from coda.contracts.records import Step
from coda.logging import get_logger
from worker.leases import LeaseGone, StepRefused

log = get_logger("worker.steps")

_Pending = tuple[Job, Step, "asyncio.Future[None]"]


class StepReporter:
    """``await reporter.report(job, step)`` (it returns once the master stored the step);
    ``await reporter.run()`` sends what is pending every ``window_s``, or at once when hurried
    or ``batch_max`` reports wait."""

    def __init__(self, master: MasterClient, window_s: float,
                 batch_max: int = STEP_BATCH_MAX) -> None:
        self.master = master
        self.window_s = window_s
        self.batch_max = max(1, min(batch_max, STEP_BATCH_MAX))
        self.pending: list[_Pending] = []
        self._wake = asyncio.Event()  # something is pending
        self._now = asyncio.Event()  # someone waits for it: send at once
        self.calls = 0

    async def report(self, job: Job, step: Step) -> None:
        """Store ``step`` of ``job`` with the next batch; raises what the master answered for
        it (:class:`LeaseGone` when the lease is lost, :class:`StepRefused` when the report is
        refused) or the batch call's own error."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append((job, step, done))
        self._wake.set()
        if len(self.pending) >= self.batch_max:
            self._now.set()
        await done

    def hurry(self) -> None:
        """Send what is pending now, or the next report at once if the one a slot waits for
        has not reached the reporter yet (its task has not run): a slot never waits for the
        window."""
        self._now.set()

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                if self.window_s > 0:  # 0: what is pending goes at once
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._now.wait(), self.window_s)
                batch, self.pending = self.pending[:self.batch_max], self.pending[self.batch_max:]
                self._now.clear()
                if not self.pending:
                    self._wake.clear()
                elif len(self.pending) >= self.batch_max:
                    self._now.set()
                await self.send(batch)
        finally:  # stopping: nothing is sent any more; whoever still waits hears why
            left, self.pending = self.pending, []
            for _job, _step, done in left:
                if not done.done():
                    done.set_exception(ServiceError(503, "the worker is stopping",
                                                    str(self.master.http.base_url)))

    async def send(self, batch: list[_Pending]) -> None:
        """One call for ``batch``; each report's future gets its outcome."""
        batch = [p for p in batch if not p[2].done()]  # a slot cancelled meanwhile
        if not batch:
            return
        self.calls += 1
        url = str(self.master.http.base_url.join("/v1/jobs/steps"))
        try:
            got = await self.master.report_steps([(job, step) for job, step, _ in batch])
        except (ServiceError, httpx.HTTPError, ValidationError) as exc:
            log.warning("job.step_reports_failed", reports=len(batch), error=str(exc)[:500])
            failed = exc if not isinstance(exc, ValidationError) else ServiceError(
                502, f"the master's answer does not fit: {str(exc)[:300]}", url)
            for _job, _step, done in batch:
                if not done.done():
                    done.set_exception(failed)
            return
        for (job, _step, done), answer in zip(batch, got.reports, strict=False):
            if done.done():
                continue
            refusal = refused(job, answer)
            if refusal is None:
                done.set_result(None)
            else:
                done.set_exception(refusal)
        for _job, _step, done in batch[len(got.reports):]:
            if not done.done():
                done.set_exception(ServiceError(502, "the master answered fewer reports than "
                                                     "were sent", url))


def refused(job: Job, answer: StepReportOutcome) -> LeaseGone | None:
    """What the master's answer for one report means: None when stored, else the typed
    outcome to raise in the slot that sent it."""
    if answer.outcome == "stored":
        return None
    if answer.outcome == "lost":
        return LeaseGone(f"job {job.id} is not leased with this token (job status: "
                         f"{answer.status.value if answer.status else 'unknown'})")
    return StepRefused(answer.detail or "step refused")
