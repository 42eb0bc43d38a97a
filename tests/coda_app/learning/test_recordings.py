"""The closed-loop run's recordings, derived from the bundled curricula (pure): the frozen
executor answers each recorded plan with its recorded action whatever the history holds and
anything else with the no-op; the judge recognises a clean run of the right plans by its actions
and nothing else; the warm-up rows mix every plan of a step by weight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coda.actions import Done
from coda.contracts.records import ScreenSize, Step
from coda.inference.replay import choose
from coda.prompts.executor import ExecutorTurn, build_executor_messages
from coda.prompts.judge import JudgeFrame, build_judge_messages
from coda_app.learning.curriculum import CurriculumError, load_curricula, load_curriculum
from coda_app.learning.recordings import (
    CORRECT,
    NO_OP,
    NOT_CORRECT,
    STAND_IN_SHOT,
    corpus,
    executor_script,
    judge_script,
    plan_kind,
    planner_script,
    warm_rows,
)
from coda_app.learning.settings import CURRICULA
from worker.followups import judge_steps

CURRICULA_LIST = load_curricula(CURRICULA)
BY_NAME = {c.name: c for c in CURRICULA_LIST}


def executor_answer(instruction: str, history: list[str], thought: str) -> str:
    msgs = build_executor_messages(instruction, [ExecutorTurn(None, h) for h in history],
                                   "data:image/png;base64,AA==", thought)
    out = choose(executor_script(CURRICULA_LIST), msgs, continuing=True)
    assert out is not None
    return out[0]


def test_the_bundled_curricula_load_with_three_tasks_ending_in_done() -> None:
    assert sorted(BY_NAME) == ["kalgebra-C-01", "kalgebra-C-02", "kalgebra-C-06"]
    for cur in CURRICULA_LIST:
        assert cur.steps[-1].right.ends_episode
        kinds = {p.kind for s in cur.steps for p in s.wrong}
        assert {"another value", "skipped step"} <= kinds
    assert any(p.kind == "another menu" for c in CURRICULA_LIST for s in c.steps for p in s.wrong)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_executor_answers_every_recorded_plan_by_its_thought_alone(name: str) -> None:
    cur = BY_NAME[name]
    history: list[str] = []
    for step in cur.steps:
        for plan in step.plans:
            if plan.executor is not None:
                # the history holds other plans' keys: only the plan being grounded counts
                assert executor_answer(cur.instruction, history, plan.text) == plan.executor
        history.append(step.right.text)
    assert executor_answer(cur.instruction, history, "Thought: I scroll around.") == NO_OP


def test_a_garbled_plan_holding_the_right_key_is_grounded_as_recorded() -> None:
    cur = BY_NAME["kalgebra-C-01"]
    garbled = "Thought: log_2(3) is type p:=log(3)/log(2) now\nAction: DONE"
    assert executor_answer(cur.instruction, [], garbled) == cur.steps[0].right.executor


def judge_answer(instruction: str, actions: list[tuple[str, str | None, bool]]) -> str:
    """The recorded judge's answer to a trajectory of (thought, executor text, done) steps,
    laid out by the worker's judge job and the judge service's prompt builder."""
    steps = [Step(index=i, thought=t, raw_executor_text=raw, action=Done() if done else None,
                  screenshot=STAND_IN_SHOT, screen=ScreenSize(width=1, height=1))
             for i, (t, raw, done) in enumerate(actions)]
    frames = [JudgeFrame(step=i + 1, image_url="data:image/png;base64,AA==", thought=s.thought,
                         action=s.action) for i, s in enumerate(judge_steps(steps))]
    out = choose(judge_script(CURRICULA_LIST), build_judge_messages(instruction, frames),
                 continuing=False)
    assert out is not None
    return out[0]


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_the_judge_recognises_a_clean_run_by_its_actions_whatever_the_wording(name: str) -> None:
    cur = BY_NAME[name]
    right = [(p.text, p.executor, p.ends_episode) for p in cur.right_plans()]
    assert judge_answer(cur.instruction, right) == CORRECT
    reworded = [(f"Thought: step {i}, worded my way\nAction: x", raw, done)
                for i, (_, raw, done) in enumerate(right)]
    assert judge_answer(cur.instruction, reworded) == CORRECT
    # a wrong value, an extra step, a skipped step: not a clean run
    first_wrong = cur.steps[0].wrong[0]
    assert judge_answer(cur.instruction, [(first_wrong.text, first_wrong.executor, False),
                                          *right[1:]]) == NOT_CORRECT
    noop = ("Thought: I wait.\nAction: x", NO_OP, False)
    assert judge_answer(cur.instruction, [noop, *right]) == NOT_CORRECT
    assert judge_answer(cur.instruction, right[-1:]) == NOT_CORRECT
    # another task's clean run is not this one's
    other = next(c for c in CURRICULA_LIST if c.name != name)
    assert judge_answer(other.instruction, right) == NOT_CORRECT


def test_plan_kinds_by_the_recordings() -> None:
    cur = BY_NAME["kalgebra-C-06"]
    assert plan_kind(cur.steps[0].right.text, cur, 0) == "right"
    assert plan_kind(cur.steps[0].wrong[0].text, cur, 0) == "another value"
    assert plan_kind(cur.steps[1].right.text, cur, 0) == "out of order"
    assert plan_kind("Thought: hm.\nAction: DONE", cur, 0) == "skipped step"
    assert plan_kind("Thought: hm.\nAction: DONE", cur, 2) == "right"
    assert plan_kind("Thought: I hum a tune.", cur, 1) == "unrecorded"


def test_other_phrasings_are_right_plans_the_replay_answers_by_the_key_they_hold() -> None:
    cur = BY_NAME["kalgebra-C-01"]
    step = cur.steps[0]
    phrasings = [p for p in step.also if p.key is None]
    assert phrasings and step.right.key is not None
    for plan in phrasings:
        assert plan_kind(plan.text, cur, 0) == "right"
        assert executor_answer(cur.instruction, [], plan.text) == step.right.executor
    route = next(p for p in step.also if p.key is not None)
    assert executor_answer(cur.instruction, [], route.text) == route.executor
    keyless = "Thought: a plan no recording answers.\nAction: x"
    assert plan_kind(keyless, cur, 0) == "unrecorded"


def unrecorded_curriculum(tmp_path: Path) -> Path:
    """C-01 with a keyless other route (no recorded key in its thought) and a keyless right."""
    doc = json.loads((CURRICULA / "kalgebra-C-01.json").read_text())
    doc["task"] = str((CURRICULA / doc["task"]).resolve())
    first = doc["steps"][0]
    first["also"].append({"text": "Thought: I type p:=ln(3)*1/ln(2) and press Enter.\nAction: x"})
    for key in ("key", "executor"):
        first["right"].pop(key)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    return path


def test_plans_without_recordings_are_named_for_the_replayed_roles(tmp_path: Path) -> None:
    cur = load_curriculum(unrecorded_curriculum(tmp_path))
    both = cur.unrecorded(executor=True, judge=True)
    # the keyless right plan, its two phrasings (no recorded key left to hold), the new route
    assert len(both) == 4 and all(g.startswith("c: step 1, right plan") for g in both)
    assert any("ln(3)*1/ln(2)" in g for g in both)
    judge = cur.unrecorded(executor=False, judge=True)
    assert len(judge) == 1 and "p:=log(3)/log(2)" in judge[0]
    assert cur.unrecorded(executor=False, judge=False) == []
    assert all(c.unrecorded(executor=True, judge=True) == [] for c in CURRICULA_LIST)


def test_coda_learn_refuses_them_unless_the_general_models_run(tmp_path: Path) -> None:
    from coda_app.learning.run import ClosedLoop
    from coda_app.learning.settings import OCR_EXECUTOR, RULES_JUDGE, LearnSettings

    tasks = unrecorded_curriculum(tmp_path)
    with pytest.raises(CurriculumError, match=r"replayed executor and judge .*ln\(3\)\*1"):
        ClosedLoop(LearnSettings(home=tmp_path / "home", tasks=tasks))
    with pytest.raises(CurriculumError, match=r"replayed judge .*step 1, right plan"):
        ClosedLoop(LearnSettings(home=tmp_path / "home", tasks=tasks, executor=OCR_EXECUTOR))
    loop = ClosedLoop(LearnSettings(home=tmp_path / "home", tasks=tasks,
                                    executor=OCR_EXECUTOR, judge=RULES_JUDGE))
    assert len(loop.curricula[0].steps[0].also) == 4


def test_warm_rows_repeat_each_state_once_per_plan_and_weight() -> None:
    cur = BY_NAME["kalgebra-C-01"]
    rows = [{"instruction": cur.instruction, "history_texts": [], "target": "x", "k": 0},
            {"instruction": cur.instruction, "history_texts": ["a"], "target": "y", "k": 1},
            {"instruction": "another task", "history_texts": [], "target": "z", "k": 2}]
    mixed = warm_rows(rows, CURRICULA_LIST)
    first = [r["target"] for r in mixed if r["k"] == 0]
    assert len(first) == sum(p.weight for p in cur.steps[0].plans)
    assert first.count(cur.steps[0].right.text) == cur.steps[0].right.weight
    for plan in cur.steps[0].also:  # the other right plans are taught too
        assert first.count(plan.text) == plan.weight
    assert {r["k"] for r in mixed} == {0, 1}


def test_the_recording_planner_and_the_corpus_cover_every_plan() -> None:
    script = planner_script(CURRICULA_LIST)
    assert len(script.entries) == sum(len(c.steps) for c in CURRICULA_LIST)
    texts = corpus(CURRICULA_LIST, repeat=1)
    assert all(p.text in texts for c in CURRICULA_LIST for s in c.steps for p in s.plans)


@pytest.mark.parametrize(("change", "error"), [
    (lambda d: d["steps"][0]["right"].update(key="nowhere"), "not in the plan's thought"),
    (lambda d: d["steps"][-1]["right"].update(executor="type(content='x')"), "ends the episode"),
    (lambda d: d["steps"].pop(), "must end the episode"),
    (lambda d: d["steps"][0]["wrong"][0].update(key="p:=log"), "also occurs"),
    (lambda d: d["steps"][0]["right"].pop("executor"), "come together"),
    (lambda d: d["steps"][0]["also"][0].update(kind="another value"), "is a right plan"),
    (lambda d: d["steps"][0]["also"].append({"text": "Thought: done.\nAction: DONE"}),
     "ends the episode"),
    (lambda d: d["steps"][0]["wrong"].append(
        {"text": "Thought: I type p:=log(3)/log(2)+1.\nAction: x", "kind": "another value"}),
     "also occurs"),
    (lambda d: d.update(task="nowhere.json"), "nowhere.json"),
])
def test_an_inconsistent_curriculum_is_refused_naming_the_problem(
        tmp_path: Path, change, error: str) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads((CURRICULA / "kalgebra-C-01.json").read_text())
    doc["task"] = str((CURRICULA / doc["task"]).resolve())
    change(doc)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CurriculumError, match=error):
        load_curriculum(path)
