"""Pure parser of planner output (``Thought: ...\\nAction: ...``)."""

from __future__ import annotations

import re
from typing import NamedTuple

_THOUGHT = re.compile(r"^\s*thought\s*:\s*", re.IGNORECASE)
_ACTION = re.compile(r"(?:^|\n)\s*action\s*:\s*", re.IGNORECASE)
_FENCE = re.compile(r"```([\w\W]*?)```")
_LANG_LINE = re.compile(r"^[A-Za-z]*[ \t]*\n")
_ANS = re.compile(r"^ANS(?:\s+([\w\W]*))?$")
_FINISHED = re.compile(r"^(?:finished\s*\(.*\)|DONE)\s*$", re.DOTALL)


class ParsedPlan(NamedTuple):
    thought: str
    action_hint: str | None
    finished: bool
    answer: str | None


def _fence_body(body: str) -> str:
    """A fenced block's code without an optional language-tag line."""
    return _LANG_LINE.sub("", body, count=1).strip()


def _strip_fence(action: str) -> str:
    m = re.fullmatch(r"\s*```([\w\W]*?)```\s*", action)
    return _fence_body(m.group(1)) if m else action.strip()


def _answer_of(code: str) -> str | None:
    m = _ANS.match(code.strip())
    if m is None:
        return None
    return (m.group(1) or "").strip()


def parse_plan(text: str) -> ParsedPlan:
    """Split planner output into thought, action hint, finished flag and answer.

    - ``Thought:`` is optional; everything before the first ``Action:`` line is the thought.
    - ``finished`` when the action is ``finished(...)`` or ``DONE`` (also fenced), or when an
      answer is given (an answer ends the episode).
    - ``answer`` from ``Action: ANS x`` or a fenced `````ANS x````` anywhere in the text.
    """
    parts = _ACTION.split(text, maxsplit=1)
    thought = _THOUGHT.sub("", parts[0], count=1).strip()
    action = _strip_fence(parts[1]) if len(parts) == 2 else None
    if action == "":
        action = None
    answer = _answer_of(action) if action is not None else None
    if answer is None:
        for block in _FENCE.findall(text):
            answer = _answer_of(_fence_body(block))
            if answer is not None:
                break
    if action is not None:
        done = _FINISHED.match(action) is not None
    else:
        done = any(_fence_body(b) == "DONE" for b in _FENCE.findall(text))
    finished = done or answer is not None
    return ParsedPlan(thought, action, finished, answer)
