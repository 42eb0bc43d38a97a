"""What the learning benchmark counts as a new plan that works (issue 37 point 6): the trainer
reports every leased plan with its best reward, ``coda learn`` keeps the rewarded ones, and the
ones whose text the warm-up data never held are novel. Pure: no loop runs."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from coda.actions import Click
from coda.contracts.training import Candidate, Group, GroupRecord, GroupStatus, StateRef
from coda_app.learning.curriculum import load_curricula
from coda_app.learning.recordings import warm_texts
from coda_app.learning.result import REWARDED, ExecutorCheck, LearnResult
from coda_app.learning.run import merge_rewarded
from coda_app.learning.settings import CURRICULA
from trainer.grpo.loop import plan_rewards


def record(plans: list[tuple[str, float]]) -> GroupRecord:
    state = StateRef(step_index=0, instruction="do it", app="demo", screenshot="s.png",
                     screen_width=100, screen_height=80)
    group = Group(state=state, target=Click(x=1, y=2),
                  candidates=[Candidate(plan=p, reward=r) for p, r in plans])
    return GroupRecord(id=uuid.uuid4(), status=GroupStatus.LEASED, group=group,
                       created_at=datetime.now(UTC))


def test_the_trainer_reports_each_plan_with_its_best_reward() -> None:
    records = [record([("a", 0.0), ("b", 1.0), ("a", 0.5)]), record([("a", 0.25), ("c", 0.0)])]
    assert plan_rewards(records) == {"a": 0.5, "b": 1.0, "c": 0.0}
    assert plan_rewards([]) == {}


def test_the_run_keeps_the_rewarded_plans_sorted_and_distinct() -> None:
    known = merge_rewarded([], {"b": 1.0, "a": REWARDED, "c": REWARDED - 0.01})
    assert known == ["a", "b"]
    assert merge_rewarded(known, {"d": 0.95, "b": 0.0}) == ["a", "b", "d"]


def test_novel_plans_are_the_rewarded_ones_the_warm_up_never_held() -> None:
    curricula = load_curricula(CURRICULA)
    texts = warm_texts(curricula)
    right = curricula[0].steps[0].right.text
    wrong = curricula[0].steps[0].wrong[0].text
    also = curricula[0].steps[0].also[0].text
    assert {right, wrong, also} <= texts
    check = ExecutorCheck(backend="ocr", files={}, files_at_end={}, ready_at_start={},
                          ready_at_end={})
    result = LearnResult(run="r", reward_control="none", target=0.9, tasks=[], settings={},
                         warm_start={}, executor=check,
                         rewarded_plans=sorted([right, also, "Thought: new.\nAction: DONE"]))
    assert result.novel_rewarded_plans(texts) == ["Thought: new.\nAction: DONE"]
    # a result written before the field reads with none
    old = result.model_dump(mode="json")
    del old["rewarded_plans"]
    assert LearnResult.model_validate(old).novel_rewarded_plans(texts) == []
