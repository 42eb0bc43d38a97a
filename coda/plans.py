"""What a planner answer means for the action space: the one rule that turns a plan into an
action, used by the rollout (``worker.episode``) and by the group job that samples G plans at
a stored step (``worker.followups``), so a step is scored by the rules the rollout used.

- a plan that says DONE ends the episode: :class:`Answer` when it carries an answer, else
  :class:`Done`;
- a plan whose action hint is FAIL ends it with :class:`Fail`;
- an empty plan is nothing to ground: no action (a parse error in a rollout, reward 0 in a
  group);
- anything else goes to the executor, whose grounded action is the step's action.
"""

from __future__ import annotations

from dataclasses import dataclass

from coda.actions import Action, Answer, Done, Fail
from coda.contracts.records import PlanRecord
from coda.contracts.services_api import Plan

FAIL_HINTS = frozenset({"FAIL", "fail()", "FAIL()"})
"""Action hints that mean the planner gives up (CODA's planner writes ``Action: FAIL``)."""

EMPTY_PLAN_ERROR = "planner: empty output"


@dataclass(frozen=True)
class PlanDecision:
    """The meaning of one plan: a terminal action the planner decided itself, a request to
    the executor (``ground``), or nothing at all (an empty plan, ``error`` says so)."""

    action: Action | None = None
    ground: bool = False
    error: str | None = None

    @property
    def ends_episode(self) -> bool:
        return self.action is not None


def decide(plan: Plan) -> PlanDecision:
    """The plan's meaning (pure): see the module docstring for the rule."""
    if plan.finished:
        return PlanDecision(action=Answer(text=plan.answer) if plan.answer is not None
                            else Done())
    if (plan.action_hint or "").strip() in FAIL_HINTS:
        return PlanDecision(action=Fail())
    if not plan.text.strip():
        return PlanDecision(error=EMPTY_PLAN_ERROR)
    return PlanDecision(ground=True)


def plan_record(plan: Plan, *, answer_mode: bool, max_thought: int = 4000) -> PlanRecord:
    """What a step stores of its plan (pure): the parsed parts and the prompt variant."""
    return PlanRecord(thought=plan.thought[:max_thought], action_hint=plan.action_hint,
                      finished=plan.finished, answer=plan.answer, answer_mode=answer_mode,
                      completion_tokens=plan.completion_tokens)
