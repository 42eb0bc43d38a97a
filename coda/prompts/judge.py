"""The judge prompt (CODA / SEAgent World State Model verdict schema, reference judge.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

JUDGE_SYSTEM_PROMPT = """You are an expert judge of computer-use agents. You are given a task instruction and the screenshots of an agent's trajectory in order, each labelled "step k" (steps are numbered from 1); a step may also carry the agent's thought and action. Decide whether the agent completed the task.

## Rules
- First write one short caption per step describing what the screenshot shows and what changed.
- Correctness is true only if the task is fully and correctly completed in the final state.
- Missing confirmations (e.g. a dialog never accepted, a file never saved), skipped inputs, a wrong element clicked or a wrong value typed are errors.
- Redundant lists the steps that did not help the task (repeated, undone or irrelevant actions).
- First_Error_Step is the number of the first step with an error, or null when there is none.
- Error_Type names the kind of the first error in a few words ("" when there is none).
- Correct_Action says what the agent should have done at First_Error_Step ("" when there is none).

## Output Format
Captions, then exactly one JSON object, strictly in this schema:
{"Correctness": true or false, "Redundant": [step numbers], "First_Error_Step": step number or null, "Error_Type": "...", "Correct_Action": "..."}
"""  # noqa: E501

TASK_TEMPLATE = "## Task\n{instruction}\n\n## Trajectory ({n} screenshots)"
CLOSING = "Now write the captions and the JSON verdict."


@dataclass(frozen=True)
class JudgeFrame:
    """One screenshot shown to the judge, with its original step number (from 1)."""

    step: int
    image_url: str
    thought: str | None = None
    action: str | None = None


def _step_text(frame: JudgeFrame) -> str:
    lines = [f"step {frame.step}"]
    if frame.thought:
        lines.append(f"Thought: {frame.thought}")
    if frame.action:
        lines.append(f"Action: {frame.action}")
    return "\n".join(lines)


def build_judge_messages(instruction: str, frames: Sequence[JudgeFrame]) -> list[dict[str, Any]]:
    """System prompt, then one user message: task, every frame labelled "step k", closing."""
    content: list[dict[str, Any]] = [
        {"type": "text", "text": TASK_TEMPLATE.format(instruction=instruction, n=len(frames))}
    ]
    for frame in frames:
        content.append({"type": "text", "text": _step_text(frame)})
        content.append({"type": "image_url", "image_url": {"url": frame.image_url}})
    content.append({"type": "text", "text": CLOSING})
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {"role": "user", "content": content},
    ]


INSTRUCTION_CHECK_PROMPT = """You review tasks written for a computer-use agent working in the application {app}. Judge the task below.
- Clear: it is unambiguous and specific (exact values, names, targets).
- Executable: it can be done inside {app} starting from the initial state{shown}, without anything prepared outside it.
- Judgeable: success can be decided from screenshots of the agent's trajectory (the final state shows it).

## Task
{instruction}

Answer with exactly one JSON object:
{{"Clear": true or false, "Executable": true or false, "Judgeable": true or false, "Reason": "..."}}"""  # noqa: E501


def build_instruction_messages(app: str, instruction: str,
                               screenshot_url: str | None = None) -> list[dict[str, Any]]:
    """One user message asking whether a generated instruction is clear/executable/judgeable."""
    text = INSTRUCTION_CHECK_PROMPT.format(
        app=app, instruction=instruction,
        shown=" shown in the screenshot" if screenshot_url else "")
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if screenshot_url is not None:
        content.append({"type": "image_url", "image_url": {"url": screenshot_url}})
    return [{"role": "user", "content": content}]
