"""The planner prompts and the message layout."""

from __future__ import annotations

import pytest

from coda.prompts.planner import (
    QWEN_PLANNER_PROMPT,
    QWEN_PLANNER_PROMPT_ANS,
    STEP_QUESTION,
    PastStep,
    build_planner_messages,
    system_prompt,
)


def test_prompts_keep_the_original_text() -> None:
    first = ("You are a GUI agent. You are given a task and your action history, with "
             "screenshots. You need to perform the next action to complete the task. \n")
    assert QWEN_PLANNER_PROMPT.startswith(first)
    assert QWEN_PLANNER_PROMPT.endswith("## User Instruction\n{instruction}\n")
    ans_note = ("- When you are asked to submit an answer, if the current screenshot provides "
                "enough information to determine it, the action should be like ```ANS "
                "your_answer```. For example: ```ANS 5```.\n")
    assert QWEN_PLANNER_PROMPT.replace(
        "input box.\n", "input box.\n" + ans_note) == QWEN_PLANNER_PROMPT_ANS
    text = system_prompt("Plot sin(x)", answer_mode=False)
    assert "- Use English in `Thought` part." in text
    assert text.endswith("## User Instruction\nPlot sin(x)\n")
    assert "ANS your_answer" in system_prompt("x", answer_mode=True)


def _images(message: dict) -> list[str]:
    content = message["content"]
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


def test_layout_without_history() -> None:
    msgs = build_planner_messages("task", [], "data:cur", previous_screenshot_url="data:prev")
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[1]["content"][0] == {"type": "text", "text": STEP_QUESTION}
    assert _images(msgs[1]) == ["data:cur"]


def test_layout_with_history_keeps_recent_images_and_all_text() -> None:
    history = [PastStep(f"Thought: t{i}\nAction: a{i}", f"data:img{i}") for i in range(4)]
    msgs = build_planner_messages("task", history, "data:cur", keep_images=2)
    roles = [m["role"] for m in msgs]
    assert roles == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert [m["content"] for m in msgs if m["role"] == "assistant"] == [s.text for s in history]
    user_images = [_images(m) for m in msgs if m["role"] == "user"]
    assert user_images == [[], [], ["data:img2"], ["data:img3"], ["data:cur"]]


def test_previous_screenshot_fills_the_last_past_step() -> None:
    history = [PastStep("Thought: a\nAction: b"), PastStep("Thought: c\nAction: d")]
    msgs = build_planner_messages("task", history, "data:cur", "data:prev")
    user_images = [_images(m) for m in msgs if m["role"] == "user"]
    assert user_images == [[], ["data:prev"], ["data:cur"]]


def test_context_window_is_bounded() -> None:
    history = [PastStep(f"s{i}", f"data:{i}") for i in range(20)]
    msgs = build_planner_messages("task", history, "data:cur", max_turns=15, keep_images=0)
    texts = [m["content"] for m in msgs if m["role"] == "assistant"]
    assert texts == [f"s{i}" for i in range(5, 20)]
    assert sum(len(_images(m)) for m in msgs if m["role"] == "user") == 1
    with pytest.raises(ValueError):
        build_planner_messages("task", history, "data:cur", max_turns=-1)


def test_builder_is_pure() -> None:
    history = [PastStep("s0")]
    before = list(history)
    build_planner_messages("task", history, "data:cur", "data:prev")
    assert history == before
