"""The executor's one message builder, exactly: roles, order, pre-fill, screenshot cap."""

from __future__ import annotations

import hashlib

import pytest

from coda.prompts.executor import (
    STEP_TEXT,
    UI_TARS_15_PROMPT,
    ExecutorTurn,
    build_executor_messages,
    prefill,
    thought_body,
    turn_text,
)

CURRENT = "data:image/png;base64,CURRENT"


def _images(message: dict) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return []
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


def test_prompt_is_codas_text() -> None:
    assert UI_TARS_15_PROMPT.startswith(
        "You are a GUI agent. You are given a task and your action history, with screenshots. "
        "You need to perform the next action to complete the task. \n\n## Output Format\n")
    assert "type(content='') #If you want to submit your input, use \"\\n\" at the end of" in (
        UI_TARS_15_PROMPT)
    assert "call_user() # Submit the task" in UI_TARS_15_PROMPT
    assert UI_TARS_15_PROMPT.endswith("## User Instruction\n{instruction}\n")


def test_prompt_is_byte_identical_to_the_release() -> None:
    # sha256 of CODA's UI_TARS_15_PROMPT (sci/base/prompt.py), trailing newline included
    digest = hashlib.sha256(UI_TARS_15_PROMPT.encode()).hexdigest()
    assert digest == "fea339bbfbeb50e2d42f3ba6d2f83f68e0b05aae7f33e328be84976b1bb343a1"


def test_no_history_layout() -> None:
    msgs = build_executor_messages("Open the File menu", [], CURRENT, "Click File.")
    assert [m["role"] for m in msgs] == ["user", "user", "assistant"]
    assert msgs[0]["content"] == UI_TARS_15_PROMPT.format(
        language="English", instruction="Open the File menu")
    assert "- Use English in `Thought` part." in msgs[0]["content"]
    assert msgs[1]["content"] == [{"type": "text", "text": STEP_TEXT},
                                  {"type": "image_url", "image_url": {"url": CURRENT}}]
    assert msgs[2] == {"role": "assistant", "content": "Thought: Click File.\nAction: "}


def test_history_turns_and_screenshot_cap() -> None:
    history = [ExecutorTurn(f"data:image/png;base64,S{i}", f"Thought: t{i}\nAction: wait()")
               for i in range(7)]
    msgs = build_executor_messages("task", history, CURRENT, "Thought: now\nAction: click")
    assert [m["role"] for m in msgs] == ["user"] + ["user", "assistant"] * 7 + [
        "user", "assistant"]
    # every past step keeps its text, in order
    assert [m["content"] for m in msgs[2:16:2]] == [t.text for t in history]
    # only the last 5 screenshots (4 past + current) are sent
    sent = [url for m in msgs for url in _images(m)]
    assert sent == [f"data:image/png;base64,S{i}" for i in (3, 4, 5, 6)] + [CURRENT]
    assert msgs[1]["content"] == STEP_TEXT  # the dropped screenshot's turn keeps its text
    assert msgs[-1] == {"role": "assistant", "content": "Thought: now\nAction: "}


@pytest.mark.parametrize("history_n", [1, 2, 5, 9])
def test_history_n(history_n: int) -> None:
    history = [ExecutorTurn(f"u{i}", "x") for i in range(6)]
    msgs = build_executor_messages("t", history, CURRENT, "go", history_n=history_n)
    sent = [url for m in msgs for url in _images(m)]
    assert len(sent) == min(history_n, 7)
    assert sent[-1] == CURRENT


def test_turns_without_screenshots_count_nothing() -> None:
    history = [ExecutorTurn("u0", "a"), ExecutorTurn(None, "b"), ExecutorTurn("u2", "c")]
    msgs = build_executor_messages("t", history, CURRENT, "go", history_n=2)
    assert [url for m in msgs for url in _images(m)] == ["u2", CURRENT]


def test_builder_is_pure() -> None:
    history = [ExecutorTurn("u0", "a")]
    first = build_executor_messages("t", history, CURRENT, "go")
    assert build_executor_messages("t", history, CURRENT, "go") == first
    with pytest.raises(ValueError, match="history_n"):
        build_executor_messages("t", history, CURRENT, "go", history_n=0)


@pytest.mark.parametrize(
    ("thought", "body"),
    [
        ("Click the File menu.", "Click the File menu."),
        ("Thought: Click the File menu.", "Click the File menu."),
        ("Thought: Click File.\nAction: click(start_box='(1,2)')", "Click File."),
        ("Thought: Line one.\nLine two.\nAction: wait()", "Line one.\nLine two."),
        ("  Thought:   spaced  \n", "spaced"),
    ],
)
def test_thought_body(thought: str, body: str) -> None:
    assert thought_body(thought) == body


@pytest.mark.parametrize(
    ("thought", "expected"),
    [
        # the planner's reply: CODA's `text.split('\nAction')[0].strip('\n').strip()`
        # + '\nAction: ', byte for byte (sci/base/agent, the executor call)
        ("Thought: Click File.\nAction: click(start_box='(1,2)')",
         "Thought: Click File.\nAction: "),
        ("Thought: Line one.\nLine two.\nAction: wait()",
         "Thought: Line one.\nLine two.\nAction: "),
        ("\n  Thought:   spaced  \n", "Thought:   spaced\nAction: "),
        ("Thought: Click the File menu.", "Thought: Click the File menu.\nAction: "),
        # a bare thought (Plan.thought) gets the label the planner writes
        ("Click the File menu.", "Thought: Click the File menu.\nAction: "),
        ("Open it.\nActionable: no\nAction: x", "Thought: Open it.\nAction: "),
    ],
)
def test_prefill_is_codas(thought: str, expected: str) -> None:
    assert prefill(thought) == expected


def test_turn_text() -> None:
    planner = "Thought: Open it.\nAction: click the icon"
    assert turn_text(planner, "click(start_box='(1,2)')") == planner
    assert turn_text("Open it.", "click(start_box='(1,2)')") == (
        "Thought: Open it.\nAction: click(start_box='(1,2)')")
    assert turn_text("Open it.") == "Open it."
