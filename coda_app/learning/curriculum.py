"""The closed-loop learning run's plans: for each task, each step's right plan, other right
plans (other phrasings, other right routes) and plausible wrong ones, with the executor's
recorded output where the replay needs one.

A curriculum file (``examples/learning/*.json``)::

    {"task": "../scienceboard/VM/KAlgebra/C-01.json",
     "steps": [{"right": {"text": "Thought: ...\\nAction: type(content='p:=log(3)/log(2)\\n')",
                          "key": "p:=log(3)/log(2)",
                          "executor": "type(content='p:=log(3)/log(2)\\n')"},
                "also": [{"text": "Thought: ... I type p:=log(3)/log(2) and press Enter ..."},
                         {"text": "Thought: ... I type p:=ln(3)/ln(2) ...",
                          "key": "p:=ln(3)/ln(2)", "executor": "..."}],
                "wrong": [{"text": "...", "key": "...", "executor": "...",
                           "kind": "another value"}, ...]},
               {"right": {"text": "Thought: ... The task is complete.\\nAction: DONE"}, ...}]}

``text`` is the planner's whole output. ``also`` holds other right plans of the step (kind
"right"): other phrasings of it, other right routes where the application has them; the warm-up
teaches them beside ``right``. The last step's right plans end the episode, no other step's do.
``weight`` is the plan's share of the warm-up data at its step (rows per state).

``key`` and ``executor`` are the replay's recordings: the text of the plan's thought its
recorded output is keyed by (unique to it among the task's plans) and that output (UI-TARS-1.5's
grammar). They come together or not at all, and a plan that ends the episode itself (``DONE``)
has neither. With the general models (the OCR executor, the rules judge) no plan needs them: a
plan earns its reward by what the executor grounds it into. The replayed roles do:
:meth:`Curriculum.unrecorded` names the plans they cannot answer (a keyless plan is answered when
its thought holds a recorded key of its own kind: another phrasing of a keyed plan), and
``coda learn`` refuses such a curriculum when the executor or the judge replays. The task path
is relative to the curriculum file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from coda.tasks import TaskLoadError, TaskSpec, load_task_file
from planner_service.parsing import parse_plan

Kind = Literal["right", "another value", "another menu", "skipped step", "other"]


class CurriculumError(ValueError):
    """A curriculum file that cannot be used (unreadable, inconsistent, its task missing)."""


class PlanChoice(BaseModel):
    """One recorded plan at a step."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, description="the planner's output: Thought ... Action ...")
    kind: Kind = "right"
    key: str | None = Field(default=None, min_length=1,
                            description="text of the thought the executor's output is keyed by")
    executor: str | None = Field(default=None, min_length=1,
                                 description="the recorded executor (UI-TARS) output")
    weight: int = Field(default=1, ge=1, le=100, description="warm-up rows at its state")

    @property
    def ends_episode(self) -> bool:
        return parse_plan(self.text).finished

    @property
    def thought(self) -> str:
        """The text the executor is given (the planner's output up to its action)."""
        return self.text.split("\nAction", 1)[0]

    @property
    def label(self) -> str:
        """The plan named in an error: its kind and the start of its text."""
        text = self.text if len(self.text) <= 70 else self.text[:67] + "..."
        return f"{self.kind} plan {text!r}"

    @model_validator(mode="after")
    def _grounded_or_terminal(self) -> PlanChoice:
        if self.ends_episode:
            if self.key is not None or self.executor is not None:
                raise ValueError("a plan that ends the episode has no key or executor output")
        else:
            if (self.key is None) != (self.executor is None):
                raise ValueError("a plan's key and executor output come together (or neither: "
                                 "a plan only the general models ground)")
            if self.key is not None and self.key not in self.thought:
                raise ValueError(f"key {self.key!r} is not in the plan's thought")
        return self


class StepChoices(BaseModel):
    model_config = ConfigDict(extra="forbid")

    right: PlanChoice
    also: list[PlanChoice] = Field(
        default_factory=list, description="other right plans: other phrasings of the step, "
        "other right routes (kind 'right')")
    wrong: list[PlanChoice] = Field(default_factory=list)

    @property
    def rights(self) -> list[PlanChoice]:
        return [self.right, *self.also]

    @property
    def plans(self) -> list[PlanChoice]:
        return [self.right, *self.also, *self.wrong]

    @model_validator(mode="after")
    def _also_right(self) -> StepChoices:
        for plan in self.also:
            if plan.kind != "right":
                raise ValueError(f"an 'also' plan is a right plan, not {plan.label}")
            if plan.ends_episode != self.right.ends_episode:
                raise ValueError(f"{plan.label} ends the episode and the step's right plan "
                                 "does not, or the other way round")
        return self


class Curriculum(BaseModel):
    """One task's recorded plans; ``spec`` is the task file it names, loaded."""

    model_config = ConfigDict(extra="forbid")

    task: str
    steps: list[StepChoices] = Field(
        default_factory=list, description="the recorded plans; none: a task for real models "
        "only (no warm-up rows, no executor or judge recordings)")
    spec: TaskSpec | None = Field(default=None, exclude=True)
    path: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> Curriculum:
        if not self.steps:
            return self
        *middle, last = self.steps
        if not last.right.ends_episode:
            raise ValueError("the last step's right plan must end the episode (Action: DONE)")
        if any(s.right.ends_episode for s in middle):
            raise ValueError("only the last step's right plan may end the episode")
        outputs: dict[str, str] = {}
        plans = [p for s in self.steps for p in s.plans]
        for plan in plans:
            if plan.key is None or plan.executor is None:
                continue
            if outputs.setdefault(plan.key, plan.executor) != plan.executor:
                raise ValueError(f"key {plan.key!r} has two different executor outputs")
            for other in plans:
                # a keyless plan may hold the key of a plan of its own kind (another phrasing:
                # the replay executor answers it with that plan's recorded output)
                borrows = other.key is None and other.kind == plan.kind
                if other.key != plan.key and plan.key in other.thought and not borrows:
                    raise ValueError(f"key {plan.key!r} also occurs in another plan: "
                                     f"{other.thought!r}")
        return self

    def unrecorded(self, *, executor: bool, judge: bool) -> list[str]:
        """The plans the replayed roles cannot answer, named: with ``executor``, every plan the
        executor grounds that neither has a key nor holds a recorded key in its thought; with
        ``judge``, every step's grounded ``right`` plan without its executor output (the
        recorded verdict is keyed by the right trajectory's recorded actions)."""
        keys = [p.key for s in self.steps for p in s.plans if p.key is not None]
        out = []
        for i, step in enumerate(self.steps, 1):
            for plan in step.plans:
                if plan.ends_episode:
                    continue
                answered = plan.key is not None or any(k in plan.thought for k in keys)
                if (executor and not answered) or (
                        judge and plan is step.right and plan.executor is None):
                    out.append(f"{self.name}: step {i}, {plan.label}")
        return out

    @property
    def instruction(self) -> str:
        assert self.spec is not None
        return self.spec.instruction

    @property
    def name(self) -> str:
        return Path(self.path or self.task).stem

    def right_plans(self) -> list[PlanChoice]:
        """Each step's ``right`` plan (the recorded right trajectory)."""
        return [s.right for s in self.steps]


def load_curriculum(path: str | Path) -> Curriculum:
    """A curriculum file with its task loaded."""
    p = Path(path)
    try:
        cur = Curriculum.model_validate(json.loads(p.read_text(encoding="utf-8")))
        cur.spec = load_task_file(p.parent / cur.task)
    except (OSError, ValueError, ValidationError, TaskLoadError) as exc:
        raise CurriculumError(f"{p}: {exc}") from exc
    cur.path = str(p)
    return cur


def load_curricula(path: str | Path) -> list[Curriculum]:
    """The curricula of a file or of every ``*.json`` in a directory (sorted by name); the
    tasks' instructions must differ (the recordings are keyed by them)."""
    p = Path(path)
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    if not files:
        raise CurriculumError(f"{p}: no curriculum files")
    out = [load_curriculum(f) for f in files]
    seen: dict[str, str] = {}
    for cur in out:
        other = seen.setdefault(cur.instruction, cur.name)
        if other != cur.name:
            raise CurriculumError(f"{cur.name} and {other} have the same instruction")
    return out
