"""The executor's prompt and its ONE message builder, shared by the service and the trainer.

The layout reproduces how CODA drives UI-TARS-1.5 (reference/prompts.md, "Executor"): CODA
reuses the planner's message history, turns the system message into a user message holding
:data:`UI_TARS_15_PROMPT`, keeps the history turns, and ends with an assistant message
pre-filled with the planner's text up to its action, ``"<thought>\\nAction: "``, that the
model continues (``GenerateOptions(continue_final_message=True)``); see :func:`prefill`.
As in UI-TARS's own agent, only the last ``history_n`` (5) screenshots are sent; older turns
keep their text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Origin: CODA's ScienceBoard code (sci/base/prompt.py, UI_TARS_15_PROMPT), the computer-use
# prompt UI-TARS-1.5 was trained on. Reproduced exactly, including the trailing space of the
# first line and the literal backslash-n in the `type` line; `{language}` is "English".
UI_TARS_15_PROMPT = (
    "You are a GUI agent. You are given a task and your action history, with screenshots. "
    "You need to perform the next action to complete the task. "
    "\n"
    r"""
## Output Format
```
Thought: ...
Action: ...
```

## Action Space
click(start_box='<|box_start|>(x1,y1)<|box_end|>')
left_double(start_box='<|box_start|>(x1,y1)<|box_end|>')
right_single(start_box='<|box_start|>(x1,y1)<|box_end|>')
drag(start_box='<|box_start|>(x1,y1)<|box_end|>', end_box='<|box_start|>(x3,y3)<|box_end|>')
hotkey(key='')
type(content='') #If you want to submit your input, use "\n" at the end of `content`.
scroll(start_box='<|box_start|>(x1,y1)<|box_end|>', direction='down or up or right or left')
wait() #Sleep for 5s and take a screenshot to check for any changes.
finished()
call_user() # Submit the task and call the user when the task is unsolvable, or when you need the user's help.

## Note
- Use {language} in `Thought` part.
- Write a small plan and finally summarize your next action (with its target element) in one sentence in `Thought` part.

## User Instruction
{instruction}
"""  # noqa: E501
)

# Origin: CODA's planner user turn (reference/prompts.md, "Planner"); the executor reuses the
# planner's history, so its past user turns carry the same text.
STEP_TEXT = (
    "Given the screenshot as below. What's the next step that you will do to help with the task?"
)
LANGUAGE = "English"
HISTORY_N = 5
"""Screenshots sent per request, the current one included (UI-TARS's ``history_n``)."""

_ACTION_LINE = re.compile(r"(?:^|\n)[ \t]*Action\s*:")
_THOUGHT_PREFIX = re.compile(r"^\s*Thought\s*:\s*")


@dataclass(frozen=True)
class ExecutorTurn:
    """A past step: its screenshot (a data/http URL, or ``None``) and the assistant text."""

    screenshot_url: str | None
    text: str
    """``Thought: ...\\nAction: ...`` as the step was taken."""


def thought_body(thought: str) -> str:
    """The thought without a leading ``Thought:`` and without the planner's ``Action:`` hint."""
    m = _ACTION_LINE.search(thought)
    head = thought[: m.start()] if m else thought
    return _THOUGHT_PREFIX.sub("", head).strip()


def prefill(thought: str) -> str:
    """The assistant pre-fill the executor continues.

    CODA (ScienceBoard's planner/executor loop) takes the planner's reply, cuts it at the
    first ``"\\nAction"``, strips it and appends ``"\\nAction: "``: the planner's
    ``Thought: ...`` text is kept byte for byte. A bare thought (the parsed ``Plan.thought``,
    without the ``Thought:`` label the planner writes) gets that label first, so both forms
    give the pre-fill CODA builds from the planner's reply.
    """
    head = thought.split("\nAction", 1)[0].strip("\n").strip()
    if not _THOUGHT_PREFIX.match(head):
        head = f"Thought: {head}"
    return f"{head}\nAction: "


def turn_text(thought: str, action_text: str | None = None) -> str:
    """Assistant text of a past step: the planner's ``Thought/Action`` text as it was, or
    ``Thought: <thought>\\nAction: <executor action>`` when the thought has no action line."""
    if _ACTION_LINE.search(thought) or not action_text:
        return thought.strip()
    return f"Thought: {thought_body(thought)}\nAction: {action_text.strip()}"


def _image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _step_message(screenshot_url: str | None) -> dict[str, Any]:
    if screenshot_url is None:
        return {"role": "user", "content": STEP_TEXT}
    parts = [{"type": "text", "text": STEP_TEXT}, _image(screenshot_url)]
    return {"role": "user", "content": parts}


def build_executor_messages(
    instruction: str,
    history: Sequence[ExecutorTurn],
    screenshot_data_url: str,
    thought: str,
    *,
    language: str = LANGUAGE,
    history_n: int = HISTORY_N,
) -> list[dict[str, Any]]:
    """OpenAI-format messages for one executor call (the model continues the last message).

    1. user: :data:`UI_TARS_15_PROMPT` with the instruction (CODA's system message);
    2. each past step: user (:data:`STEP_TEXT` + its screenshot), assistant (its text);
       screenshots older than the last ``history_n - 1`` steps are dropped, the text stays;
    3. user: :data:`STEP_TEXT` + the current screenshot;
    4. assistant: :func:`prefill` of ``thought``.
    """
    if history_n < 1:
        raise ValueError("history_n must be at least 1 (the current screenshot)")
    prompt = UI_TARS_15_PROMPT.format(language=language, instruction=instruction)
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    keep = history_n - 1
    with_image = [i for i, t in enumerate(history) if t.screenshot_url is not None]
    kept = set(with_image[max(0, len(with_image) - keep):])
    for i, turn in enumerate(history):
        messages.append(_step_message(turn.screenshot_url if i in kept else None))
        messages.append({"role": "assistant", "content": turn.text})
    messages.append(_step_message(screenshot_data_url))
    messages.append({"role": "assistant", "content": prefill(thought)})
    return messages
