"""One rule turns a plan into an action: the rollout (``worker.episode``) and the group job
(``worker.followups``) give the same plan text the same action and the same reward path.

Before, a FAIL plan became ``Fail()`` in a rollout but was sent to the executor in a group job,
so a positively judged FAIL step was scored by other rules than the rollout used."""

from __future__ import annotations

import inspect

import pytest

from coda.actions import Action, Answer, Click, Done, Fail
from coda.contracts.services_api import (
    BASE_VERSION,
    ActBatchRequest,
    ActBatchResponse,
    ActResult,
    ImageRef,
    Plan,
)
from coda.contracts.training import StateRef
from coda.plans import EMPTY_PLAN_ERROR, decide
from coda.rewards import action_reward
from planner_service.parsing import parse_plan
from worker import episode, followups
from worker.followups import grounded_actions
from worker.settings import WorkerSettings

CLICK = Click(x=100, y=200)
SCREEN = (1280, 800)
KEY = "sha256/ab/" + "a" * 64 + ".png"


def plan_of(text: str) -> Plan:
    """A plan as the planner service answers it (its own parser)."""
    parsed = parse_plan(text)
    return Plan(thought=parsed.thought, action_hint=parsed.action_hint, text=text,
                finished=parsed.finished, answer=parsed.answer, version=BASE_VERSION)


class RecordingExecutor:
    """The executor's batch call at the seam: grounds every thought it gets to one click and
    records what it was asked (the rollout's executor would ground the same thought)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def act_batch(self, req: ActBatchRequest) -> ActBatchResponse:
        self.asked += req.thoughts
        return ActBatchResponse(results=[
            ActResult(action=CLICK, raw="click(start_box='(100,200)')")
            for _ in req.thoughts], latency_ms=0.0)


def rollout_action(plan: Plan) -> tuple[Action | None, bool, str | None]:
    """What the rollout does with a plan: its action (the executor's click where it grounds),
    whether the executor was asked, and the step error."""
    d = decide(plan)
    if d.ground:
        return CLICK, True, None
    return d.action, False, d.error


TEXTS: list[tuple[str, Action | None]] = [
    ("Thought: the plot is there.\nAction: DONE", Done()),
    ("Thought: read it off.\nAction: ANS 42", Answer(text="42")),
    ("Thought: this cannot be done.\nAction: FAIL", Fail()),
    ("Thought: give up\nAction: fail()", Fail()),
    ("   ", None),
    ("Thought: open the menu.\nAction: click the File menu", CLICK),
]


@pytest.mark.parametrize(("text", "expected"), TEXTS)
async def test_the_same_plan_text_gives_the_same_action_and_reward_in_both(
        text: str, expected: Action | None) -> None:
    plan = plan_of(text)
    action, grounded, error = rollout_action(plan)
    assert action == expected
    assert error == (EMPTY_PLAN_ERROR if expected is None else None)

    executor = RecordingExecutor()
    state = StateRef(step_index=0, instruction="i", app="a", screenshot=KEY,
                     screen_width=SCREEN[0], screen_height=SCREEN[1])
    (group_action, raw), = await grounded_actions(
        executor, WorkerSettings(), state, ImageRef(ref=KEY), [],  # type: ignore[arg-type]
        [plan.text], [decide(plan)])
    assert group_action == action
    assert (executor.asked == [plan.text]) is grounded and (raw is not None) is grounded
    for target in (Fail(), Done(), CLICK):
        assert action_reward(group_action, target, SCREEN) == action_reward(action, target,
                                                                              SCREEN)


def test_a_fail_step_scores_full_marks_for_a_fail_plan_in_its_group() -> None:
    # the bug: a positively judged FAIL step, grounded by the executor in the group job
    assert action_reward(decide(plan_of("Thought: no.\nAction: FAIL")).action, Fail(),
                         SCREEN) == 1.0


def test_both_paths_use_the_one_rule() -> None:
    for module in (episode, followups):
        src = inspect.getsource(module)
        assert "decide(" in src and "FAIL_HINTS" not in src and "plan.finished" not in src

