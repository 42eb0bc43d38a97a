"""Pure parts of the worker: history rebuilt from stored steps, attempts, judge steps, group
states, step timings, settings, provider options and the wait for a quiet screen."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from coda.actions import Hotkey
from coda.clients.base import ServiceError
from coda.contracts.history import ImageRef
from coda.contracts.jobs import JudgeJobResult
from coda.contracts.records import Episode, EpisodeStatus, Step, StepTimings
from coda.contracts.training import Verdict, Vote
from worker.episode import lease_lost, overhead_ms, started_timings
from worker.followups import JobRefused, judge_steps, state_of
from worker.history import attempt_steps, clip, history_of, storable
from worker.providers.base import wait_quiet
from worker.providers.factory import ProviderConfigError, make_provider
from worker.settings import WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
KEY = "sha256/ab/" + "a" * 64 + ".png"


def step(index: int, attempt: int = 1, thought: str | None = "Thought: t\nAction: a",
         **kw: object) -> Step:
    fields: dict[str, object] = {"screenshot": KEY, "screen": {"width": 1280, "height": 800},
                                 "raw_executor_text": f"click(start_box='({index},{index})')"}
    fields.update(kw)
    return Step.model_validate({"index": index, "attempt": attempt, "thought": thought,
                                **fields})


def test_history_keeps_steps_with_plan_text_and_clips_it() -> None:
    steps = [step(0), step(1, thought=None), step(2, thought="x\x00y" + "z" * 70_000)]
    hist = history_of(steps)
    assert len(hist) == 2 and hist[0].screenshot is not None and hist[0].screenshot.ref == KEY
    assert "\x00" not in hist[1].thought and len(hist[1].thought) == 65_536
    assert len(history_of([step(i) for i in range(100)], keep=10)) == 10
    assert clip("a\x00b", 2) == "ab"


def test_storable_removes_nul_from_model_output_everywhere() -> None:
    # a tiny judge's raw vote held a NUL: the master refused the verdict (422) and the judge job
    # failed; every result and step now goes out without NULs
    result = JudgeJobResult(verdict=Verdict(correct=False, error_type="x\x00", votes=[
        Vote(model="m\x00", raw="a\x00b", parsed=True, redundant=[3])]))
    clean = storable(result)
    assert isinstance(clean, JudgeJobResult) and clean.verdict.error_type == "x"
    assert clean.verdict.votes == [Vote(model="m", raw="ab", parsed=True, redundant=[3])]
    assert storable(step(0)) == step(0)


def test_attempt_steps_default_to_the_latest_attempt() -> None:
    steps = [step(1, 2), step(0, 1), step(0, 2), step(1, 1), step(2, 1)]
    assert [(s.attempt, s.index) for s in attempt_steps(steps)] == [(2, 0), (2, 1)]
    assert [s.index for s in attempt_steps(steps, 1)] == [0, 1, 2]
    assert attempt_steps([]) == []


def test_judge_steps_carry_screenshot_thought_and_action_text() -> None:
    js = judge_steps([step(0), step(1, screenshot=None, screen=None), step(2)])
    assert [j.action for j in js] == ["click(start_box='(0,0)')", "click(start_box='(2,2)')"]
    typed = step(0, raw_executor_text=None, action=Hotkey(keys=["ctrl", "s"]).model_dump())
    assert "hotkey" in (judge_steps([typed])[0].action or "")


def _episode(steps: list[Step]) -> Episode:
    return Episode(id=uuid.uuid4(), batch_id=uuid.uuid4(), job_id=uuid.uuid4(), task_id="t",
                   app="TeXstudio", rollout=0, status=EpisodeStatus.COMPLETED,
                   created_at=datetime.now(UTC), steps=steps, instruction="fix the typo")


def test_state_of_rebuilds_the_planner_input_of_a_step() -> None:
    steps = [step(0), step(1, screen={"width": 1920, "height": 1080})]
    state, target_step, history = state_of(_episode(steps), steps, 1)
    assert state.step_index == 1 and state.instruction == "fix the typo"
    assert (state.screen_width, state.screen_height) == (1920, 1080)
    assert state.previous_screenshot == KEY and len(state.history) == 1
    assert state.history[0].screenshot == ImageRef(ref=KEY) and target_step.index == 1
    assert state.history == history  # one shape: the planner's history is what is stored
    assert [h.screenshot.ref for h in history if h.screenshot] == [KEY]
    with pytest.raises(JobRefused, match="no step 7"):
        state_of(_episode(steps), steps, 7)
    no_instruction = _episode(steps).model_copy(update={"instruction": None})
    with pytest.raises(JobRefused, match="instruction"):
        state_of(no_instruction, steps, 0)


def test_step_overhead_leaves_out_models_and_the_action() -> None:
    t = started_timings().model_copy(update={"total": 500, "plan_model": 100,
                                             "execute_model": 50, "act": 20, "settle": 300})
    assert overhead_ms(t) == 30
    assert overhead_ms(started_timings().model_copy(update={"total": 10, "settle": 20})) == 0
    assert started_timings().model_dump() == dict.fromkeys(StepTimings.model_fields, 0.0)


def test_settings_read_lists_and_json_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                           ) -> None:
    monkeypatch.setenv("CODA_WORKER_KINDS", "judge, group")
    monkeypatch.setenv("CODA_WORKER_JUDGE_POLICY", '{"votes": 2}')
    monkeypatch.setenv("CODA_WORKER_PROVIDER_OPTIONS", '{"ram": "8G"}')
    s = WorkerSettings()
    assert [k.value for k in s.kinds] == ["judge", "group"]
    assert s.judge_policy.votes == 2 and s.provider_options == {"ram": "8G"}


def test_provider_options_are_checked_by_name() -> None:
    with pytest.raises(ProviderConfigError, match=r"provider_options\.nope"):
        make_provider("local", {"nope": 1})
    with pytest.raises(ProviderConfigError, match="template_vmx"):
        make_provider("vmware", {})
    with pytest.raises(ProviderConfigError, match="unknown provider"):
        make_provider("hyperv")
    local = make_provider("local", screen=(800, 600))
    try:
        assert local.name == "local"
    finally:
        local.close()


class Screen:
    """A scripted screen on a scripted clock: ``frames[i]`` is what polls see from time i*0.05
    on; a full capture costs 0.01 s and records when it was taken."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames, self.now, self.captures = frames, 0.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def small(self) -> bytes:
        return self.frames[min(int(round(self.now / 0.05, 6)), len(self.frames) - 1)]

    def full(self) -> Any:
        self.captures.append(self.small())
        self.now += 0.01
        return self.small()


def test_wait_quiet_keeps_the_capture_of_the_settled_screen() -> None:
    screen = Screen([b"a", b"b", b"c", b"c", b"c", b"c", b"c", b"c", b"c"])
    settled, shot = wait_quiet(screen.small, timeout_s=5, poll_s=0.05, quiet_s=0.2,
                               full=screen.full, clock=screen.clock, sleep=screen.sleep)
    assert settled and shot == b"c" and screen.captures == [b"c"]
    assert screen.now >= 0.1 + 0.2  # the quiet period is waited out, the capture inside it


def test_wait_quiet_drops_a_capture_when_the_screen_changes_again() -> None:
    screen = Screen([b"a", b"a", b"b", b"b", b"b", b"b", b"b", b"b", b"b", b"b"])
    settled, shot = wait_quiet(screen.small, timeout_s=5, poll_s=0.05, quiet_s=0.2,
                               full=screen.full, clock=screen.clock, sleep=screen.sleep)
    assert settled and shot == b"b" and screen.captures == [b"a", b"b"]


def test_wait_quiet_without_capture_and_on_timeout() -> None:
    screen = Screen([b"a", b"a", b"a", b"a", b"a", b"a"])
    assert wait_quiet(screen.small, timeout_s=5, poll_s=0.05, quiet_s=0.2,
                      clock=screen.clock, sleep=screen.sleep) == (True, None)
    busy = Screen([bytes([i]) for i in range(200)])  # never quiet
    assert wait_quiet(busy.small, timeout_s=1, poll_s=0.05, quiet_s=0.2, full=busy.full,
                      clock=busy.clock, sleep=busy.sleep) == (False, None)


def test_a_model_service_unavailable_fails_the_attempt_not_the_step() -> None:
    from coda.clients.base import ServiceError
    from worker.episode import AttemptFailed, unavailable

    for status in (502, 503, 504):
        with pytest.raises(AttemptFailed) as err:
            unavailable("planner", ServiceError(status, "model backend: down", "http://p"))
        assert err.value.reason == "service_unavailable" and err.value.retry
    unavailable("planner", ServiceError(422, "bad", "http://p"))  # a step error, recorded
    unavailable("executor", ServiceError(413, "too long", "http://e"))


def _episode_run(report: Coroutine[Any, Any, None]) -> Any:
    """An episode run whose attempt fails at once, with ``report`` as the step report in
    flight (only the job's id and the report matter here)."""
    from types import SimpleNamespace

    from worker.episode import AttemptFailed, EpisodeRun
    from worker.steps import StepReporter

    run = EpisodeRun(job=SimpleNamespace(id=uuid.uuid4()), desktop=None, master=None,  # type: ignore[arg-type]
                     planner=None, executor=None, settings=None,  # type: ignore[arg-type]
                     reporter=StepReporter(None, window_s=0))  # type: ignore[arg-type]

    async def attempt() -> None:
        raise AttemptFailed("x_crashed", "the display is gone")

    run._run = attempt  # type: ignore[method-assign]
    run._report = asyncio.create_task(report)
    return run


async def test_a_failed_attempt_lands_its_step_report_and_raises_its_own_error() -> None:
    from worker.episode import AttemptFailed
    from worker.leases import LeaseGone

    async def lost() -> None:
        raise LeaseGone("the master took the lease back")

    run = _episode_run(lost())
    with pytest.raises(AttemptFailed):  # the report's loss is logged, not raised instead
        await run.run()
    assert run._report is None


async def test_a_cancel_while_the_step_report_lands_is_not_swallowed() -> None:
    landed = asyncio.Event()
    run = _episode_run(landed.wait())  # type: ignore[arg-type]
    report = run._report
    task = asyncio.create_task(run.run())
    await asyncio.sleep(0)  # the attempt failed; run() waits for the report in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):  # not swallowed, nor the attempt's error raised
        await task
    assert report.cancelled()  # the report it waited on goes with it: nothing more is sent


def test_only_the_masters_404_is_a_lost_lease() -> None:
    """A group job's planner answering 404 (an adapter no longer loaded) fails the job with
    that error; it is not mistaken for the master taking the lease back (which left the job to
    expire and retry until its attempts ran out)."""
    master = "http://127.0.0.1:8000"
    gone = ServiceError(409, "lease lost", f"{master}/v1/jobs/x/complete")
    planner = ServiceError(404, "adapter 'grpo-000004' is not loaded",
                           "http://127.0.0.1:8001/v1/plan")
    assert lease_lost(gone, master) and lease_lost(gone, master + "/")
    assert not lease_lost(planner, master)
    assert not lease_lost(ServiceError(404, "x", "http://127.0.0.1:80001/v1/jobs"), master)
    assert not lease_lost(ServiceError(500, "x", f"{master}/v1/jobs/x/complete"), master)
