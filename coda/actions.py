"""The one action space: typed GUI actions in absolute screen pixels.

Every component speaks these models: the executor service returns them, the worker executes
them (through :func:`to_pyautogui`), the reward compares two of them. Conversions from the
executor's text (UI-TARS-1.5 grammar) live in :mod:`coda.uitars`.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class ActionType(StrEnum):
    CLICK = "click"
    DOUBLE_CLICK = "double_click"
    RIGHT_CLICK = "right_click"
    DRAG = "drag"
    MOVE = "move"
    SCROLL = "scroll"
    TYPE = "type"
    HOTKEY = "hotkey"
    PRESS = "press"
    WAIT = "wait"
    DONE = "done"
    FAIL = "fail"
    ANSWER = "answer"


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Point(_Base):
    x: int = Field(ge=0, description="screen pixel, from the left")
    y: int = Field(ge=0, description="screen pixel, from the top")


class Click(_Point):
    type: Literal[ActionType.CLICK] = ActionType.CLICK


class DoubleClick(_Point):
    type: Literal[ActionType.DOUBLE_CLICK] = ActionType.DOUBLE_CLICK


class RightClick(_Point):
    type: Literal[ActionType.RIGHT_CLICK] = ActionType.RIGHT_CLICK


class Move(_Point):
    type: Literal[ActionType.MOVE] = ActionType.MOVE


class Drag(_Base):
    type: Literal[ActionType.DRAG] = ActionType.DRAG
    x1: int = Field(ge=0)
    y1: int = Field(ge=0)
    x2: int = Field(ge=0)
    y2: int = Field(ge=0)


class Scroll(_Base):
    type: Literal[ActionType.SCROLL] = ActionType.SCROLL
    x: int | None = Field(default=None, ge=0)
    y: int | None = Field(default=None, ge=0)
    direction: Literal["up", "down", "left", "right"]
    amount: int = Field(default=5, ge=1, le=100, description="wheel clicks")


class TypeText(_Base):
    type: Literal[ActionType.TYPE] = ActionType.TYPE
    text: str = Field(description="literal text; a trailing newline presses Enter")


class Hotkey(_Base):
    type: Literal[ActionType.HOTKEY] = ActionType.HOTKEY
    keys: list[str] = Field(min_length=1, description="pyautogui key names, pressed together")


class Press(_Base):
    type: Literal[ActionType.PRESS] = ActionType.PRESS
    key: str = Field(min_length=1)


class Wait(_Base):
    type: Literal[ActionType.WAIT] = ActionType.WAIT
    seconds: float = Field(default=5.0, ge=0, le=300)


class Done(_Base):
    type: Literal[ActionType.DONE] = ActionType.DONE
    message: str | None = None


class Fail(_Base):
    type: Literal[ActionType.FAIL] = ActionType.FAIL
    reason: str | None = None


class Answer(_Base):
    type: Literal[ActionType.ANSWER] = ActionType.ANSWER
    text: str


Action = Annotated[
    Click
    | DoubleClick
    | RightClick
    | Move
    | Drag
    | Scroll
    | TypeText
    | Hotkey
    | Press
    | Wait
    | Done
    | Fail
    | Answer,
    Field(discriminator="type"),
]
ACTION_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)


def parse_action(data: object) -> Action:
    """Validate a dict (or JSON string) into a typed :data:`Action`."""
    if isinstance(data, str | bytes):
        return ACTION_ADAPTER.validate_json(data)
    return ACTION_ADAPTER.validate_python(data)


def _key(name: str) -> str:
    """Map common key spellings to pyautogui names."""
    k = name.strip().lower()
    return {
        "arrowup": "up",
        "arrowdown": "down",
        "arrowleft": "left",
        "arrowright": "right",
        "return": "enter",
        "escape": "esc",
        "control": "ctrl",
        "cmd": "command",
        "super": "win",
        "meta": "win",
        "spacebar": "space",
        "pgup": "pageup",
        "pgdn": "pagedown",
    }.get(k, k)


def to_pyautogui(action: Action) -> str:
    """Python source that performs ``action`` with pyautogui (OSWorld's `/execute` payload).

    Text is typed with ``typewrite`` from a JSON literal, so quotes, backslashes and newlines
    arrive exactly as given (no clipboard, no escaping defects).
    """
    match action:
        case Click(x=x, y=y):
            return f"pyautogui.click({x}, {y})"
        case DoubleClick(x=x, y=y):
            return f"pyautogui.doubleClick({x}, {y})"
        case RightClick(x=x, y=y):
            return f"pyautogui.rightClick({x}, {y})"
        case Move(x=x, y=y):
            return f"pyautogui.moveTo({x}, {y})"
        case Drag(x1=x1, y1=y1, x2=x2, y2=y2):
            return (
                f"pyautogui.moveTo({x1}, {y1})\n"
                f"pyautogui.dragTo({x2}, {y2}, duration=0.5, button='left')"
            )
        case Scroll(x=x, y=y, direction=d, amount=n):
            head = f"pyautogui.moveTo({x}, {y})\n" if x is not None and y is not None else ""
            if d in ("up", "down"):
                return head + f"pyautogui.scroll({n if d == 'up' else -n})"
            return head + f"pyautogui.hscroll({n if d == 'right' else -n})"
        case TypeText(text=text):
            body, enter = (text[:-1], True) if text.endswith("\n") else (text, False)
            code = f"pyautogui.typewrite({json.dumps(body)}, interval=0.01)" if body else ""
            if enter:
                code += ("\n" if code else "") + "pyautogui.press('enter')"
            return code or "pass"
        case Hotkey(keys=keys):
            return "pyautogui.hotkey(" + ", ".join(repr(_key(k)) for k in keys) + ")"
        case Press(key=key):
            return f"pyautogui.press({_key(key)!r})"
        case Wait(seconds=s):
            return f"time.sleep({s})"
        case Done() | Fail() | Answer():
            return "pass"
    raise TypeError(f"not an action: {action!r}")  # pragma: no cover
