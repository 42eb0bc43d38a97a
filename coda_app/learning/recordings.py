"""What the closed-loop run derives from its curricula (pure functions):

- the **frozen executor**: a replay script answering each recorded plan with its recorded
  UI-TARS output, keyed by the task's instruction and a text of the plan's thought
  (``final_contains``: the thought the executor is given, not the history); any other plan
  gets :data:`NO_OP`, a recorded action that changes nothing;
- the **judge**: a replay script keyed by the whole trajectory: a clean run of the task's right
  plans (as the judge service lays its steps out) is correct; anything else is "not correct"
  with no step located, which CODA's labelling rule (clean successes only) turns into no
  positive step;
- the **recording planner**: the right plans, turn by turn, so that real episodes of the right
  trajectories give the warm-up data its screenshots and histories;
- the **warm-up rows**: each recorded state's row again with every plan of its step (the right
  one, the other right plans of ``also``, the wrong ones) as the target, as many times as the
  plan's weight (stage-2 SFT on them makes the planner propose a mixture);
- the **tokenizer corpus** of the tiny planner built for the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from coda.actions import Done
from coda.contracts.records import ScreenSize, Step
from coda.inference.replay import ReplayEntry, ReplayScript
from coda.prompts.judge import CLOSING, TASK_TEMPLATE
from coda.prompts.planner import STEP_QUESTION, system_prompt
from coda_app.learning.curriculum import Curriculum
from planner_service.parsing import parse_plan
from worker.followups import judge_steps

NO_OP = "hotkey(key='shift')"
"""The executor's recorded answer to a plan it has no recording for: a key press that changes
nothing on the screen (its reward against any labelled action of another type is 0)."""

STAND_IN_SHOT = f"sha256/00/{'0' * 64}.png"
"""A screenshot key for steps built only for their text (the judge's text has no image)."""

CORRECT = ("The agent followed the task's recorded right plan step by step and ended it.\n"
           '```json\n{"Correctness": true, "Redundant": [], "First_Error_Step": null, '
           '"Error_Type": "", "Correct_Action": ""}\n```')
NOT_CORRECT = ('{"Correctness": false, "Redundant": [], "First_Error_Step": null, '
               '"Error_Type": "", "Correct_Action": ""}')


def executor_script(curricula: Sequence[Curriculum]) -> ReplayScript:
    """The frozen executor: every grounded plan's recorded output, wrong plans' entries first
    (a garbled plan holding two keys gets the wrong one)."""
    entries: list[ReplayEntry] = []
    for cur in curricula:
        plans = [p for s in cur.steps for p in s.wrong] + [p for s in cur.steps
                                                           for p in s.rights]
        seen: set[str] = set()
        for plan in plans:
            if plan.key is None or plan.executor is None or plan.key in seen:
                continue
            seen.add(plan.key)
            entries.append(ReplayEntry(contains=cur.instruction, final_contains=plan.key,
                                       outputs=[plan.executor]))
    return ReplayScript(name="closed-loop executor (recorded UI-TARS outputs)", entries=entries,
                        default=NO_OP)


def right_steps(cur: Curriculum) -> list[Step]:
    """The steps a clean run of the task's right plans records (screenshots stand-in keys)."""
    out = []
    for i, plan in enumerate(cur.right_plans()):
        out.append(Step(index=i, thought=plan.text, raw_executor_text=plan.executor,
                        action=Done() if plan.ends_episode else None,
                        screenshot=STAND_IN_SHOT, screen=ScreenSize(width=1, height=1)))
    return out


def trajectory_parts(cur: Curriculum) -> list[str]:
    """The judge's key for a clean run of the task's right plans: the parts of its prompt text
    (the judge service's layout, one text part per step between the images) from the task line
    to the closing line, with every step's thought left out: the trajectory is recognised by the
    actions it took, in order, and its length, whatever the planner's wording."""
    steps = judge_steps(right_steps(cur))
    parts = [TASK_TEMPLATE.format(instruction=cur.instruction, n=len(steps)) + "\nstep 1\n"]
    for k, step in enumerate(steps, 1):
        after = f"step {k + 1}\n" if k < len(steps) else CLOSING
        parts.append(f"\nAction: {step.action}\n{after}")
    return parts


def judge_script(curricula: Sequence[Curriculum]) -> ReplayScript:
    return ReplayScript(
        name="closed-loop judge (recorded verdicts keyed by the trajectory's actions)",
        entries=[ReplayEntry(contains_all=trajectory_parts(c), outputs=[CORRECT])
                 for c in curricula if c.steps],
        default=NOT_CORRECT)


def plan_kind(text: str, cur: Curriculum, index: int) -> str:
    """What a sampled plan at step ``index`` of a task was, by the recordings: the kind of the
    step's plan it is or whose key its thought holds ("right", "another value", ...), "right"
    for a DONE at the last step and "skipped step" before it, "out of order" for another step's
    plan, "unrecorded" for anything else (it gets the executor's no-op)."""
    thought = text.split("\nAction", 1)[0]
    if parse_plan(text).finished:
        return "right" if index == len(cur.steps) - 1 else "skipped step"
    if index < len(cur.steps):
        for plan in cur.steps[index].plans:
            if plan.text == text or (plan.key is not None and plan.key in thought):
                return plan.kind
    if any(p.key is not None and p.key in thought for s in cur.steps for p in s.plans):
        return "out of order"
    return "unrecorded"


def planner_script(curricula: Sequence[Curriculum]) -> ReplayScript:
    """The right plans turn by turn (the recording phase's planner)."""
    entries = [ReplayEntry(turn=i, contains=cur.instruction, outputs=[plan.text])
               for cur in curricula for i, plan in enumerate(cur.right_plans())]
    return ReplayScript(name="closed-loop recording planner (right plans)", entries=entries)


def warm_rows(rows: Iterable[dict[str, Any]], curricula: Sequence[Curriculum],
              ) -> list[dict[str, Any]]:
    """Each exported row of a right trajectory once per plan of its step and weight, the plan
    as the target (rows of other tasks or steps are left out)."""
    by_instruction = {c.instruction: c for c in curricula}
    out = []
    for row in rows:
        cur = by_instruction.get(row["instruction"])
        k = len(row["history_texts"])
        if cur is None or k >= len(cur.steps):
            continue
        for plan in cur.steps[k].plans:
            out += [{**row, "target": plan.text}] * plan.weight
    return out


def warm_texts(curricula: Sequence[Curriculum]) -> set[str]:
    """Every plan text the warm-up data holds: each step's right, ``also`` and wrong plans (the
    targets of :func:`warm_rows`)."""
    return {p.text for c in curricula for s in c.steps for p in s.plans}


def corpus(curricula: Sequence[Curriculum], repeat: int = 20) -> list[str]:
    """Texts the run's tiny planner tokenizer is trained on: every plan and prompt."""
    plans = [p.text for c in curricula for s in c.steps for p in s.plans]
    prompts = [system_prompt(c.instruction) for c in curricula] + [STEP_QUESTION]
    return plans * repeat + prompts * max(1, repeat // 4)
