"""One episode attempt on one desktop: reset -> setup -> (screenshot -> planner -> executor ->
act -> record)* -> checkers -> result.

Failures are sorted by whose fault they are:

- the desktop (agent gone, X crashed, a hung application that stops answering): the attempt
  fails with the typed reason (:class:`AttemptFailed`); the master requeues it and the slot's
  next reset replaces the desktop;
- a model service that answers with an error, or model output that does not parse: a recorded
  step error, counted against the step budget; the episode goes on;
- a model service that cannot be reached at all, or that answers 502 / 503 / 504 once the
  client's retries are spent (its model server is down or restarting, e.g. a killed vLLM): the
  attempt fails (``service_unreachable`` / ``service_unavailable``, retryable) and no step is
  recorded for it, so no stored step lacks the plan its outcome depends on;
- the lease (the master gave the job to someone else): :class:`LeaseGone`, nothing more is sent;
- the desktop provider's infrastructure (vSphere unreachable, credentials refused, a template
  or image missing): :class:`~coda.contracts.desktop.ProviderDown` goes to the worker, which
  gives the job back without counting the attempt (:mod:`worker.runner`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from coda.actions import Action, Answer, Done, Fail
from coda.clients.base import RETRY_STATUS, ServiceError
from coda.clients.executor import ExecutorClient
from coda.clients.master import MasterClient
from coda.clients.planner import PlannerClient
from coda.contracts.desktop import DesktopBroken, Observation, ProviderDown, StepStatus
from coda.contracts.jobs import EpisodeInfo, EpisodeJob, EpisodePayload, EpisodeResult
from coda.contracts.records import (
    ScreenSize,
    Step,
    StepOutcome,
    StepTimings,
)
from coda.contracts.services_api import (
    ActRequest,
    ImageRef,
    PlanRequest,
    Sampling,
    stored_version,
)
from coda.logging import get_logger
from coda.plans import decide, plan_record
from worker.history import clip, history_of, storable
from worker.leases import LeaseGone
from worker.providers.base import Desktop
from worker.providers.client import GuestError
from worker.settings import WorkerSettings
from worker.steps import StepReporter
from worker.tasks import TaskContext, run_checkers, run_setup
from worker.tasks.checkers import episode_end
from worker.tasks.readiness import LAUNCHING, ready_titles, wait_for_app

log = get_logger("worker.episode")
T = TypeVar("T")


class AttemptFailed(RuntimeError):
    """This attempt cannot go on; ``reason`` is typed (a :class:`BrokenReason` value,
    ``setup_failed``, ``service_unreachable``, ...); ``retry`` whether another attempt may help;
    ``service`` the model service (planner, executor) that was down, if that is the reason."""

    def __init__(self, reason: str, detail: str, *, retry: bool = True,
                 service: str | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retry = retry
        self.service = service


def unavailable(service: str, exc: ServiceError) -> None:
    """A model service answering 502 / 503 / 504 after the client's retries (its model server
    down or restarting) fails the attempt, retryable, instead of recording a step error."""
    if exc.status in RETRY_STATUS:
        raise AttemptFailed("service_unavailable", f"{service}: {exc}",
                            service=service) from exc


def lease_lost(exc: ServiceError, master_url: str | None = None) -> bool:
    """The master's answer that it no longer holds the job for us. With ``master_url``, only an
    answer of the master counts: a 404 of a model service (e.g. a planner adapter no longer
    loaded) is that service's refusal, not a lost lease."""
    if master_url is not None and not exc.url.startswith(master_url.rstrip("/") + "/"):
        return False
    return exc.status in (404, 409, 410)


def started_timings() -> StepTimings:
    """A step's timings as its stopwatch starts: each part 0 ms until it is measured (a part
    the step does not reach, e.g. no action to act on, stays 0)."""
    return StepTimings(**dict.fromkeys(StepTimings.model_fields, 0.0))


def ms_since(mark: float) -> float:
    """Milliseconds since ``mark`` (a ``time.perf_counter()``), rounded to microseconds."""
    return round((time.perf_counter() - mark) * 1000, 3)


def overhead_ms(t: StepTimings) -> float:
    """The worker's own time: all but model inference and the action's own effect (the guest
    acting and the screen settling)."""
    return round(max(0.0, t.total - t.plan_model - t.execute_model - t.act - t.settle), 3)


def executor_sampling(settings: WorkerSettings) -> Sampling:
    return Sampling(temperature=settings.executor_temperature,
                    max_tokens=settings.executor_max_tokens)


def answer_mode(payload: EpisodePayload) -> bool:
    """ScienceBoard tasks that end with an answer (a ``stop`` item of value ``ANS``) use the
    planner's ANS prompt."""
    return any(e.type == "stop" and (e.model_extra or {}).get("value") == "ANS"
               for e in payload.task.evaluators)


@dataclass
class EpisodeRun:
    """Runs one leased episode job on one desktop."""

    job: EpisodeJob
    desktop: Desktop
    master: MasterClient
    planner: PlannerClient
    executor: ExecutorClient
    settings: WorkerSettings
    reporter: StepReporter
    """The worker's step reports (batched across its slots; window 0: each sent at once)."""
    pool: Executor | None = None
    steps: list[Step] = field(default_factory=list)
    _report: asyncio.Task[None] | None = None
    _version: str | None = None
    """The planner version the episode runs: the batch's pin, else the version that wrote its
    first plan, asked for again at every later step (a version published mid-episode does not
    take over half of it)."""
    _settled: Observation | None = None
    """The screen as the last settle left it (taken during its quiet period): the next step's
    observation, unless something came between."""

    async def flush_report(self) -> None:
        """Wait for the step report in flight (its error, e.g. :class:`LeaseGone`, here)."""
        pending, self._report = self._report, None
        if pending is not None:
            if not pending.done():
                self.reporter.hurry()  # this slot waits for it: the batch goes now
            await pending

    async def _thread(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kw))

    async def _desktop(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """A desktop call; a broken desktop fails the attempt with its typed reason. A failure
        of the provider's infrastructure (:class:`ProviderDown`) is not the episode's: it goes
        to the worker as it is, which gives the job back uncounted."""
        try:
            return await self._thread(fn, *args, **kw)
        except ProviderDown:
            raise
        except DesktopBroken as exc:
            raise AttemptFailed(exc.reason.value, exc.detail) from exc
        except GuestError as exc:
            raise AttemptFailed("guest_error", str(exc)) from exc

    async def _master(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except ServiceError as exc:
            if lease_lost(exc):
                raise LeaseGone(str(exc)) from exc
            raise

    # ------------------------------------------------------------------------------------

    async def run(self) -> EpisodeResult:
        try:
            return await self._run()
        finally:  # a failed attempt keeps the steps it reported
            await self._land_report()

    async def _land_report(self) -> None:
        """However the attempt ended, the step report in flight lands first. Its own failure
        (the lease taken back, the master away) is logged, not raised: the attempt's outcome
        is what goes on; a cancellation of this task goes on too."""
        try:
            await self.flush_report()
        except (LeaseGone, ServiceError, httpx.HTTPError) as exc:
            log.warning("episode.step_report_lost", job=str(self.job.id),
                        error=f"{type(exc).__name__}: {exc}")

    async def _run(self) -> EpisodeResult:
        payload = self.job.payload
        task = payload.task
        log.info("episode.start", job=str(self.job.id), episode=str(payload.episode_id),
                 task=task.id, app=task.app, attempt=self.job.attempt, slot=self.desktop.slot)
        self.desktop.budget = self.settings.screenshot_budget()
        await self._desktop(self.desktop.reset)
        ctx = TaskContext.for_desktop(self.desktop, task, errata=self.settings.checker_errata)
        report = await self._desktop(run_setup, ctx)
        problem = report.first_problem
        if problem is not None:
            permanent = problem.status in (StepStatus.UNSUPPORTED, StepStatus.UNAVAILABLE)
            raise AttemptFailed("setup_failed", f"step {problem.index} ({problem.func}) "
                                f"{problem.status.value}: {problem.detail}", retry=not permanent)
        if any(step.func in LAUNCHING for step in task.setup):
            await self._desktop(wait_for_app, self.desktop, ready_titles(task),
                                self.settings.app_ready_timeout_s)
        await self._settle()
        budget = min(task.step_budget, self.settings.max_steps or task.step_budget)
        last: Action | None = None
        ended = False
        for index in range(budget):
            last, ended = await self._step(payload, index)
            if ended:
                break
        await self.flush_report()
        end = episode_end(last if ended else None)
        outcome = await self._desktop(run_checkers, ctx, end)
        final = await self._desktop(self.desktop.observe)
        final_key = (await self._master(self.master.upload_artifact(
            final.image, final.media_type))).key
        errors = sum(1 for s in self.steps if s.outcome is not StepOutcome.OK)
        log.info("episode.end", job=str(self.job.id), episode=str(payload.episode_id),
                 end=end.kind, verdict=outcome.verdict.value, steps=len(self.steps),
                 step_errors=errors)
        return EpisodeResult(
            success=outcome.success,
            score=None if outcome.success is None else float(outcome.success),
            answer=end.answer, final_screenshot=final_key, steps=len(self.steps),
            info=EpisodeInfo(end=end.kind, verdict=outcome.verdict, checks=outcome.results,
                             setup=report.steps, step_errors=errors, slot=self.desktop.slot,
                             overhead_ms=[s.timings.overhead for s in self.steps
                                          if s.timings is not None]))

    async def _settle(self) -> float:
        """Wait for the screen to settle, keeping the settled screen for the next step."""
        self._settled = None
        if self.settings.settle_timeout_s <= 0:
            return 0.0
        start = time.perf_counter()
        self._settled = await self._desktop(self.desktop.settle_and_observe,
                                            timeout_s=self.settings.settle_timeout_s)
        return ms_since(start)

    async def _observe(self) -> Observation:
        """The settled screen when the last settle caught it, else a new screenshot."""
        shot, self._settled = self._settled, None
        return shot if shot is not None else await self._desktop(self.desktop.observe)

    async def _step(self, payload: EpisodePayload, index: int) -> tuple[Action | None, bool]:
        """One step; returns the action taken (if any) and whether the episode ended."""
        t = started_timings()
        start = time.perf_counter()
        obs = await self._observe()
        t.observe = ms_since(start)
        mark = time.perf_counter()
        key = (await self._master(self.master.upload_artifact(obs.image, obs.media_type))).key
        t.upload = ms_since(mark)
        shot = ImageRef(ref=key)
        history = history_of(self.steps)
        task = payload.task
        ans = answer_mode(payload)
        step = Step(index=index, screenshot=key, planner_version=payload.planner_version,
                    screen=ScreenSize(width=obs.screen_width, height=obs.screen_height))
        action: Action | None = None
        ended = False

        mark = time.perf_counter()
        try:
            plans = await self.planner.plan(PlanRequest(
                instruction=clip(task.instruction), screenshot=shot, history=history,
                sampling=Sampling(temperature=self.settings.temperature,
                                  max_tokens=self.settings.max_tokens),
                answer_mode=ans, adapter=self._version or payload.planner_version))
            plan = plans.plans[0]
            self._version = self._version or payload.planner_version or plan.version
            t.plan_model = min(round(plans.latency_ms, 3), ms_since(mark))
        except ServiceError as exc:
            unavailable("planner", exc)
            plan = None
            step.outcome, step.error = StepOutcome.MODEL_ERROR, clip(f"planner: {exc}", 2000)
        except httpx.TransportError as exc:
            raise AttemptFailed("service_unreachable", f"planner: {exc!r}",
                                service="planner") from exc
        t.plan = ms_since(mark)

        if plan is not None:
            step.thought = clip(plan.text)
            step.planner_version = stored_version(plan.version)
            step.plan = plan_record(plan, answer_mode=ans)
            decision = decide(plan)
            if decision.ends_episode:
                action, ended = decision.action, True
            elif decision.ground:
                action, ended = await self._execute(payload, step, shot, obs, history, t)
            else:
                step.outcome, step.error = StepOutcome.PARSE_ERROR, decision.error
        if action is not None:
            step.action = action
            if not ended:
                mark = time.perf_counter()
                result = await self._desktop(self.desktop.act, action)
                t.act = ms_since(mark)
                if not result.ok:
                    step.outcome = StepOutcome.EXECUTION_ERROR
                    step.error = clip(f"guest: {result.error or 'action failed'}", 2000)
                t.settle = await self._settle()
        # The step goes to the master while the next one starts; the previous report must have
        # landed first (steps stay in order, and a lease the master took back stops us here).
        mark = time.perf_counter()
        await self.flush_report()
        t.report = ms_since(mark)
        t.total = ms_since(start)
        t.overhead = overhead_ms(t)
        step.latency_ms = t.total
        step.timings = t
        step = storable(step)
        self._report = asyncio.create_task(self._master(self.reporter.report(self.job, step)))
        self.steps.append(step)
        return (action if step.outcome is StepOutcome.OK else None), ended

    async def _execute(self, payload: EpisodePayload, step: Step, shot: ImageRef,
                       obs: Observation, history: list[Any],
                       t: StepTimings) -> tuple[Action | None, bool]:
        mark = time.perf_counter()
        try:
            res = await self.executor.act(ActRequest(
                instruction=clip(payload.task.instruction), thought=step.thought or "",
                screenshot=shot, history=history, screen_width=obs.screen_width,
                screen_height=obs.screen_height, sampling=executor_sampling(self.settings)))
            t.execute_model = min(round(res.latency_ms, 3), ms_since(mark))
        except ServiceError as exc:
            unavailable("executor", exc)
            step.outcome, step.error = StepOutcome.MODEL_ERROR, clip(f"executor: {exc}", 2000)
            return None, False
        except httpx.TransportError as exc:
            raise AttemptFailed("service_unreachable", f"executor: {exc!r}",
                                service="executor") from exc
        finally:
            t.execute = ms_since(mark)
        step.raw_executor_text = clip(res.raw)
        if res.error is not None or res.action is None:
            step.outcome = StepOutcome.PARSE_ERROR
            step.error = clip(f"executor: {res.error.message if res.error else 'no action'}",
                              2000)
            return None, False
        return res.action, isinstance(res.action, Done | Fail | Answer)
