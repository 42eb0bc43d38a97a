"""The typed action space and its pyautogui code."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from coda.actions import (
    Click,
    Drag,
    Hotkey,
    Press,
    Scroll,
    TypeText,
    Wait,
    parse_action,
    to_pyautogui,
)


@pytest.mark.parametrize(("action", "code"), [
    (Click(x=10, y=20), "pyautogui.click(10, 20)"),
    (parse_action({"type": "double_click", "x": 1, "y": 2}), "pyautogui.doubleClick(1, 2)"),
    (parse_action({"type": "right_click", "x": 1, "y": 2}), "pyautogui.rightClick(1, 2)"),
    (parse_action({"type": "move", "x": 3, "y": 4}), "pyautogui.moveTo(3, 4)"),
    (Drag(x1=1, y1=2, x2=30, y2=40),
     "pyautogui.moveTo(1, 2)\npyautogui.dragTo(30, 40, duration=0.5, button='left')"),
    (Scroll(x=5, y=6, direction="down"), "pyautogui.moveTo(5, 6)\npyautogui.scroll(-5)"),
    (Scroll(direction="left", amount=2), "pyautogui.hscroll(-2)"),
    (Hotkey(keys=["Control", "s"]), "pyautogui.hotkey('ctrl', 's')"),
    (Press(key="Return"), "pyautogui.press('enter')"),
    (Wait(seconds=2), "time.sleep(2.0)"),
    (parse_action({"type": "done"}), "pass"),
    (TypeText(text="\n"), "pyautogui.press('enter')"),
])
def test_to_pyautogui(action, code):
    assert to_pyautogui(action) == code


def test_type_text_keeps_quotes_backslashes_and_enter():
    code = to_pyautogui(TypeText(text="it's \"x\" \\ <tag>\n"))
    assert code == ('pyautogui.typewrite("it\'s \\"x\\" \\\\ <tag>", interval=0.01)\n'
                    "pyautogui.press('enter')")
    ns: dict[str, list[str]] = {"typed": []}
    exec(code.replace("pyautogui.typewrite", "typed.append").replace(", interval=0.01", "")
         .replace("pyautogui.press('enter')", "typed.append('<ENTER>')"), ns)
    assert ns["typed"] == ["it's \"x\" \\ <tag>", "<ENTER>"]


def test_parse_action_rejects_bad_input_naming_the_field():
    with pytest.raises(ValidationError, match="x"):
        parse_action({"type": "click", "x": -1, "y": 0})
    with pytest.raises(ValidationError, match="type"):
        parse_action({"type": "teleport"})
    assert parse_action('{"type": "answer", "text": "42"}').text == "42"  # type: ignore[union-attr]
