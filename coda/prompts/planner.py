"""The planner prompts and the one message builder shared by the service and the trainer.

The prompt texts are copied verbatim from CODA's ScienceBoard code (file sci/base/prompt.py,
``QwenPlannerPrompt`` / ``QwenPlannerPromptANS``); the released planner was trained on them,
so they are the model's interface: do not edit them (the trailing space after "the task." is
part of the original).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LANGUAGE = "English"
MAX_TURNS = 15
KEEP_IMAGES = 1
"""Past screenshots kept by default: the previous one (CODA's planner sees the current and
the previous screenshot); older turns keep their text only."""

STEP_QUESTION = (
    "Given the screenshot as below. What's the next step that you will do to help with the task?"
)

# origin: CODA sci/base/prompt.py, QwenPlannerPrompt (verbatim)
QWEN_PLANNER_PROMPT = """You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the next action to complete the task. 

## Output Format
```
Thought: ...
Action: ...
```

## Example:
Thought: To adjust the time scale, next action is to click the "Time" menu.
Action: click(start_box='(116,58,197,90)')

## Note
- Use {language} in `Thought` part.
- Clearly specify the target element and the action in thought.
- To enter new text, first delete the existing content or select all of it in the input box.

## User Instruction
{instruction}
"""  # noqa: E501

# origin: CODA sci/base/prompt.py, QwenPlannerPromptANS (verbatim)
QWEN_PLANNER_PROMPT_ANS = """You are a GUI agent. You are given a task and your action history, with screenshots. You need to perform the next action to complete the task. 

## Output Format
```
Thought: ...
Action: ...
```

## Example:
Thought: To adjust the time scale, next action is to click the "Time" menu.
Action: click(start_box='(116,58,197,90)')

## Note
- Use {language} in `Thought` part.
- Clearly specify the target element and the action in thought.
- To enter new text, first delete the existing content or select all of it in the input box.
- When you are asked to submit an answer, if the current screenshot provides enough information to determine it, the action should be like ```ANS your_answer```. For example: ```ANS 5```.

## User Instruction
{instruction}
"""  # noqa: E501


@dataclass(frozen=True)
class PastStep:
    """One past step as the planner sees it.

    ``text`` is the planner's own ``Thought: ...\\nAction: ...`` output of that step;
    ``screenshot_url`` the screen it was written for (a data URL or an http URL), if kept.
    """

    text: str
    screenshot_url: str | None = None


def system_prompt(instruction: str, *, answer_mode: bool = False, language: str = LANGUAGE) -> str:
    """The planner's system prompt for ``instruction``."""
    template = QWEN_PLANNER_PROMPT_ANS if answer_mode else QWEN_PLANNER_PROMPT
    return template.format(language=language, instruction=instruction)


def _user_turn(image_url: str | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": STEP_QUESTION}]
    if image_url is not None:
        content.append({"type": "image_url", "image_url": {"url": image_url}})
    return {"role": "user", "content": content}


def build_planner_messages(
    instruction: str,
    history: Sequence[PastStep],
    screenshot_url: str,
    previous_screenshot_url: str | None = None,
    answer_mode: bool = False,
    max_turns: int = MAX_TURNS,
    keep_images: int = KEEP_IMAGES,
    language: str = LANGUAGE,
) -> list[dict[str, Any]]:
    """OpenAI-format messages for one planner call (pure; the trainer uses it too).

    Layout (CODA): system prompt; for each of the last ``max_turns`` past steps a user turn
    (question text + that step's screenshot) and an assistant turn with the step's text;
    then the user turn with the current screenshot. Only the ``keep_images`` most recent
    past screenshots are sent; older past steps keep their text. ``previous_screenshot_url``
    stands in for the most recent past step's screenshot when that step carries none; with
    no history there is no past turn to attach it to and it is not sent.
    """
    if max_turns < 0 or keep_images < 0:
        raise ValueError("max_turns and keep_images must be >= 0")
    steps = list(history)[-max_turns:] if max_turns else []
    if steps and steps[-1].screenshot_url is None and previous_screenshot_url is not None:
        steps[-1] = PastStep(steps[-1].text, previous_screenshot_url)
    first_with_image = len(steps) - keep_images
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt(instruction, answer_mode=answer_mode,
                                                    language=language)}
    ]
    for i, step in enumerate(steps):
        url = step.screenshot_url if i >= first_with_image else None
        messages.append(_user_turn(url))
        messages.append({"role": "assistant", "content": step.text})
    messages.append(_user_turn(screenshot_url))
    return messages
