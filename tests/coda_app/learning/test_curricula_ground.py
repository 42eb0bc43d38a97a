"""The bundled curricula's plans, grounded by the OCR executor's rules on a KAlgebra screen and
scored by CODA's reward: what each plan earns comes from what the executor does with it, not
from a recorded key.

A plan's labelled action is its route's: the recorded executor output of the keyed right plan
whose key its thought holds (its own, or the one it is another phrasing of), or ``DONE``. Every
right plan (``right`` and ``also``) must earn at least :data:`RIGHT` against its route's label
and the step's ``right`` plan's label is the step's; a wrong plan must earn less than every
right plan against every right label of its step."""

from __future__ import annotations

import pytest

from coda.actions import Action, Done
from coda.grounding import OcrLine, decide
from coda.inference.ocr_executor import action_text
from coda.prompts.executor import thought_body
from coda.rewards import action_reward
from coda.uitars import parse_uitars
from coda_app.learning.curriculum import Curriculum, PlanChoice, StepChoices, load_curricula
from coda_app.learning.settings import CURRICULA

W, H = 1280, 800
KALGEBRA = [  # the lines OCR reads on KAlgebra's main window (console tab open)
    OcrLine("File Edit Settings Help", 0, 0, 200, 20),
    OcrLine("Console", 250, 184, 310, 204),
    OcrLine("2D Graph", 318, 184, 385, 204),
    OcrLine("3D Graph", 393, 184, 460, 204),
    OcrLine("Dictionary", 468, 184, 545, 204),
    OcrLine("Variables", 980, 60, 1060, 80),
    OcrLine("Name Value", 980, 90, 1120, 110),
]
RIGHT = 0.9

CURRICULA_FILES = load_curricula(CURRICULA)


def grounded(plan: PlanChoice) -> Action:
    """The action the rollout's rule gives a plan: the planner's own DONE, else the OCR
    executor's grounding of its thought (as the backend writes and the worker parses it)."""
    if plan.ends_episode:
        return Done()
    decision = decide(thought_body(plan.text), KALGEBRA, image_w=W)
    assert decision.kind not in ("ungrounded", "finished"), (plan.text, decision.reason)
    return parse_uitars(action_text(decision, W, H), W, H, image_w=W, image_h=H).action


def recorded(executor: str) -> Action:
    return parse_uitars(executor, W, H, image_w=W, image_h=H).action


def route_label(step: StepChoices, plan: PlanChoice) -> Action:
    if plan.ends_episode:
        return Done()
    if plan.executor is not None:
        return recorded(plan.executor)
    keyed = [p for p in step.rights if p.key is not None and p.key in plan.thought]
    assert len(keyed) == 1, f"{plan.label} holds no single recorded right key"
    assert keyed[0].executor is not None
    return recorded(keyed[0].executor)


def reward(plan: PlanChoice, label: Action) -> float:
    return action_reward(grounded(plan), label, (W, H))


@pytest.mark.parametrize("cur", CURRICULA_FILES, ids=lambda c: c.name)
def test_every_right_plan_grounds_to_its_routes_action(cur: Curriculum) -> None:
    for i, step in enumerate(cur.steps, 1):
        step_label = route_label(step, step.right)
        for plan in step.rights:
            label = route_label(step, plan)
            assert reward(plan, label) >= RIGHT, f"step {i}: {plan.label}"
            if label == step_label:  # another phrasing of the step's right plan
                assert reward(plan, step_label) >= RIGHT, f"step {i}: {plan.label}"


@pytest.mark.parametrize("cur", CURRICULA_FILES, ids=lambda c: c.name)
def test_every_wrong_plan_earns_less_than_every_right_plan(cur: Curriculum) -> None:
    for i, step in enumerate(cur.steps, 1):
        for label in {route_label(step, p).model_dump_json(): route_label(step, p)
                      for p in step.rights}.values():
            floor = min(reward(p, label) for p in step.rights if route_label(step, p) == label)
            for plan in step.wrong:
                assert reward(plan, label) < floor, f"step {i}: {plan.label} against {label}"


def test_every_step_has_other_phrasings_and_the_routes_are_recorded() -> None:
    for cur in CURRICULA_FILES:
        for i, step in enumerate(cur.steps, 1):
            same = [p for p in step.also
                    if route_label(step, p) == route_label(step, step.right)]
            assert len(same) >= 2, f"{cur.name} step {i}: fewer than two other phrasings"
            assert step.wrong, f"{cur.name} step {i}: no wrong plan"
        assert not cur.unrecorded(executor=True, judge=True), cur.name
