"""A rule-based judge: labels a trajectory from what it can observe, with no model weights and
no per-task data. It is not a VLM and does not read the screen's meaning.

What it sees and what it says, in the judge's own output grammar (the JSON a judge model
answers, parsed by :func:`judge_service.parsing.parse_vote`, so the service's voting and the
label rule treat its votes like any model's):

- ``Correctness``: the task's checker verdict as the request carries it
  (:attr:`~coda.contracts.services_api.JudgeRequest.checker_success`). Without one (no checker
  decided, or an older worker) it cannot judge: its reply carries no ``Correctness``, which the
  service counts as a failed vote (not correct).
- ``Redundant``: a step that left the screen unchanged (its screenshot and the next step's are
  equal, up to a small per-cell tolerance on a coarse greyscale grid: :func:`screen_changed`),
  and a step whose action repeats the previous step's (same action text; scrolling, key
  presses and waits are exempt: repeating them is how one goes further). The last step has no
  screenshot after it, so only the repeat rule applies to it.
- ``First_Error_Step``: located only in a failed trajectory: the first step whose plan gave
  the executor no action (``no_action``), else the last step when it claims completion (a DONE
  or an answer the checker refused: ``wrong_completion``); otherwise none is named.

The pure core (:func:`screen_changed`, :func:`normalized_action`, :func:`action_kind`,
:func:`redundant_steps`, :func:`first_error`, :func:`rule_verdict`) has no I/O;
:class:`RuleJudge` reads the screenshots, one at a time, and answers.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageChops

from coda.contracts.services_api import JudgeRequest
from coda.imagerefs import ScreenshotReader
from coda.inference.base import BackendRejected, ChatMessage, Completion, GenerateOptions

RULES_BACKEND = "rules"
"""The ``backend`` of a judge model entry (``CODA_JUDGE_MODELS``) that is this judge."""

GRID = (320, 200)
"""The greyscale grid two screenshots are compared on (each cell the mean of its pixels)."""
TOLERANCE = 12
"""A cell changed when its grey level moved by more than this (0-255)."""

STEPPING_KINDS = frozenset({"scroll", "hotkey", "press", "key", "keydown", "keyup", "wait"})
"""Actions whose repetition is how one goes further (scroll on, press Down again)."""
COMPLETION_KINDS = frozenset({"done", "finished", "answer"})
"""Actions that claim the task is complete."""


def frame_signature(image: Image.Image) -> Image.Image:
    """The screenshot on the comparison grid: greyscale, each cell its pixels' mean."""
    return image.convert("L").resize(GRID, Image.Resampling.BOX)


def _cells_apart(before: Image.Image, after: Image.Image, tolerance: int) -> int:
    """Cells of two signatures more than ``tolerance`` apart."""
    return sum(ImageChops.difference(before, after).histogram()[tolerance + 1:])


def changed_cells(before: Image.Image, after: Image.Image, tolerance: int = TOLERANCE) -> int:
    """How many cells of the grid differ by more than ``tolerance`` (all when the screens'
    sizes differ)."""
    if before.size != after.size:
        return GRID[0] * GRID[1]
    return _cells_apart(frame_signature(before), frame_signature(after), tolerance)


def screen_changed(before: Image.Image, after: Image.Image, tolerance: int = TOLERANCE) -> bool:
    """Whether the screen changed between two screenshots: any cell of the grid moved by
    more than ``tolerance``. A blinking caret or a clock counts as a change, so a step that did
    nothing there is missed rather than a step that did something being called redundant."""
    return changed_cells(before, after, tolerance) > 0


_ACTION_LINE = re.compile(r"(?im)^\s*action\s*:")
_CALL = re.compile(r"^([a-z_]+)\s*\(")


def normalized_action(text: str | None) -> str | None:
    """The action a step's text names, for comparison: what follows its last ``Action:`` line
    (an executor reply carries a thought before it), whitespace collapsed, lower case; None
    when there is none."""
    if text is None:
        return None
    marks = list(_ACTION_LINE.finditer(text))
    if marks:
        text = text[marks[-1].end():]
    norm = " ".join(text.split()).lower()
    return norm or None


def action_kind(action: str | None) -> str | None:
    """The kind of a normalized action: a typed action's ``type`` (``{"type": "done"}``), an
    executor call's function name (``click(start_box=...)``), else its first word."""
    if action is None:
        return None
    if action.startswith("{"):
        try:
            obj = json.loads(action)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("type"), str):
            return str(obj["type"])
    call = _CALL.match(action)
    if call:
        return call.group(1)
    return action.split()[0].strip(".:;,()")


def redundant_steps(changed: Sequence[bool | None], actions: Sequence[str | None]) -> list[int]:
    """1-based steps that are redundant: ``changed[i] is False`` (the screen after step i is
    the one before it; None where unknown, as after the last step) or step i repeats step
    i-1's action (not for :data:`STEPPING_KINDS`)."""
    if len(changed) != len(actions):
        raise ValueError("one change flag per step")
    out = []
    for i, (moved, action) in enumerate(zip(changed, actions, strict=True)):
        repeated = (i > 0 and action is not None and action == actions[i - 1]
                    and action_kind(action) not in STEPPING_KINDS)
        if moved is False or repeated:
            out.append(i + 1)
    return out


def first_error(actions: Sequence[str | None],
                correct: bool | None) -> tuple[int | None, str | None]:
    """(1-based first error step, its type) where a failed trajectory shows one: the first step
    with no action, else the last step when it claims completion; (None, None) otherwise."""
    if correct is not False or not actions:
        return None, None
    for i, action in enumerate(actions):
        if action is None:
            return i + 1, "no_action"
    if action_kind(actions[-1]) in COMPLETION_KINDS:
        return len(actions), "wrong_completion"
    return None, None


@dataclass(frozen=True)
class RuleVerdict:
    """What the rules found in one trajectory."""

    correctness: bool | None
    redundant: list[int] = field(default_factory=list)
    first_error_step: int | None = None
    error_type: str | None = None
    reasons: list[str] = field(default_factory=list)

    def answer(self) -> str:
        """The judge's JSON reply; no ``Correctness`` key when there is no checker verdict."""
        body: dict[str, Any] = {}
        if self.correctness is not None:
            body["Correctness"] = self.correctness
        body.update({"Redundant": self.redundant, "First_Error_Step": self.first_error_step,
                     "Error_Type": self.error_type, "Correct_Action": None,
                     "Reason": "; ".join(self.reasons)})
        return json.dumps(body)


def rule_verdict(changed: Sequence[bool | None], raw_actions: Sequence[str | None],
                 checker_success: bool | None) -> RuleVerdict:
    """The rules over one trajectory (pure): ``changed[i]`` whether the screen changed after
    step i (None: unknown), ``raw_actions`` each step's action text."""
    actions = [normalized_action(a) for a in raw_actions]
    redundant = redundant_steps(changed, actions)
    step, kind = first_error(actions, checker_success)
    reasons = ["no checker verdict: correctness unknown" if checker_success is None
               else f"the task's checker {'passed' if checker_success else 'failed'}"]
    for s in redundant:
        reasons.append(f"step {s}: " + ("screen unchanged" if changed[s - 1] is False
                                        else f"repeats step {s - 1}"))
    if step is not None:
        reasons.append(f"step {step}: first error ({kind})")
    return RuleVerdict(correctness=checker_success, redundant=redundant, first_error_step=step,
                       error_type=kind, reasons=reasons)


def screen_changes(req: JudgeRequest, reader: ScreenshotReader) -> list[bool | None]:
    """Whether the screen changed after each step (None after the last), holding one decoded
    screenshot at a time. Blocking."""
    out: list[bool | None] = []
    before: tuple[tuple[int, int], Image.Image] | None = None
    for i, step in enumerate(req.steps):
        image = reader.read(step.screenshot, ("steps", i, "screenshot")).image
        now = (image.size, frame_signature(image))
        if before is not None:
            out.append(before[0] != now[0] or _cells_apart(before[1], now[1], TOLERANCE) > 0)
        before = now
    return [*out, None]


class _WithoutModel:
    """The parts of the backend contract a judge without a model answers alike."""

    name = RULES_BACKEND

    async def load_adapter(self, version: str, path: str) -> None:
        raise BackendRejected("the rule-based judge has no adapters", 400)

    async def unload_adapter(self, version: str) -> None:
        raise BackendRejected("the rule-based judge has no adapters", 400)

    def adapters(self) -> dict[str, str]:
        return {}

    async def ready(self) -> dict[str, Any]:
        return {"backend": RULES_BACKEND, "grid": list(GRID), "tolerance": TOLERANCE}

    async def aclose(self) -> None:
        return None


class RuleJudge(_WithoutModel):
    """The rule-based judge as a judge model of the ensemble (``"backend": "rules"``). The
    judge service asks it :meth:`answer` for a trajectory; it has no chat of its own."""

    async def answer(self, req: JudgeRequest, reader: ScreenshotReader) -> str:
        changed = await asyncio.to_thread(screen_changes, req, reader)
        return rule_verdict(changed, [s.action for s in req.steps],
                            req.checker_success).answer()

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        raise BackendRejected("the rule-based judge judges trajectories only "
                              "(POST /v1/judge); it answers no free-form conversation", 400)


class Answered(_WithoutModel):
    """The rule judge's answer for the trajectory at hand as a backend that gives it to every
    conversation, so the service's voting runs on it unchanged."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        return [Completion(text=self.text, finish_reason="stop") for _ in range(options.n)]
