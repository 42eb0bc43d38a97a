"""UI-TARS-1.5 output text -> one typed :data:`coda.actions.Action` in screen pixels.

The pinned ``ui-tars==0.5.1`` package is used where it is right: :func:`smart_resize` and the
normalisation of boxes by ``parse_action_to_structure_output`` (model pixels in the
smart-resized image -> 0..1). Everything it gets wrong (see ``reference/ui-tars.md``) is done
here: box tokens are stripped first, the thought and the *first* action call are found by a
quote-aware scanner (real newlines, ``\\'`` and parentheses inside ``content`` are fine),
string escapes are decoded once (no literal backslashes), scroll coordinates are scaled like
any other point, and ``wait()``, ``finished()``, ``call_user()`` and ``press`` map to typed
actions. The conversion to pyautogui is :func:`coda.actions.to_pyautogui`, never the
package's code generator.

Mapping (UI-TARS name -> action):

- ``click`` / ``left_single`` -> Click, ``left_double`` -> DoubleClick,
  ``right_single`` -> RightClick, ``hover`` / ``move_to`` -> Move (centre of the box);
- ``drag(start_box, end_box)`` -> Drag; ``scroll(start_box?, direction)`` -> Scroll;
- ``hotkey(key='ctrl s')`` -> Hotkey(keys=['ctrl', 's']) (``+`` also separates keys);
- ``press`` / ``keydown`` (one key) -> Press; with several keys -> Hotkey;
- ``type(content=...)`` -> TypeText (a trailing newline means Enter);
- ``wait()`` -> Wait(5 s); ``finished(content=...)`` -> Done(message=content): CODA treats
  ``finished()`` as DONE, answers come from the planner's ``ANS`` line, so the content is
  kept in ``Done.message`` rather than becoming an Answer;
- ``call_user()`` -> Fail(reason="call_user").

Only the first action of the output is parsed; anything after its closing parenthesis
(further actions, trailing text) is ignored. Boxes ``(x1,y1,x2,y2)`` become their centre;
``<point>x y</point>`` and ``point=`` are accepted too. Output that cannot be turned into an
action raises :class:`ActionParseError`, which callers record as a step outcome.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from typing import Any

from ui_tars.action_parser import (
    IMAGE_FACTOR,
    MAX_PIXELS,
    MIN_PIXELS,
    convert_point_to_coordinates,
    parse_action_to_structure_output,
)
from ui_tars.action_parser import smart_resize as _pkg_smart_resize

from coda.actions import (
    Action,
    Click,
    Done,
    DoubleClick,
    Drag,
    Fail,
    Hotkey,
    Move,
    Press,
    RightClick,
    Scroll,
    TypeText,
    Wait,
)

__all__ = [
    "IMAGE_FACTOR",
    "MAX_PIXELS",
    "MIN_PIXELS",
    "ActionParseError",
    "ParsedOutput",
    "model_to_screen",
    "parse_uitars",
    "smart_resize",
]

WAIT_SECONDS = 5.0
_BOX_TOKENS = ("<|box_start|>", "<|box_end|>")
_CALL_START = re.compile(r"\s*([A-Za-z_]\w*)\s*\(")
_KWARG = re.compile(r"\s*([A-Za-z_]\w*)\s*=\s*")
_CLOSES = re.compile(r"\s*(?:\)|,\s*[A-Za-z_]\w*\s*=|$)")
_ACTION_LINE = re.compile(r"(?:^|\n)[ \t]*Action\s*:[ \t]*")
_ACTION_ANY = re.compile(r"Action\s*:[ \t]*")
_THOUGHT_PREFIX = re.compile(r"^\s*Thought\s*:\s*")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_BARE_VALUE = re.compile(r"[^,)]*")
_ALIASES = {"point": "start_box", "start_point": "start_box", "end_point": "end_box"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "'": "'", '"': '"', "\\": "\\"}

_POINTER: dict[str, type[Click | DoubleClick | RightClick | Move]] = {
    "click": Click,
    "left_single": Click,
    "left_double": DoubleClick,
    "double_click": DoubleClick,
    "right_single": RightClick,
    "right_click": RightClick,
    "hover": Move,
    "move_to": Move,
    "mouse_move": Move,
}


class ActionParseError(ValueError):
    """The model output is not one well-formed UI-TARS-1.5 action."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.message = message
        self.text = text


@dataclass(frozen=True)
class ParsedOutput:
    thought: str | None
    """The ``Thought:`` part (``None`` when the output has none)."""
    action: Action
    action_text: str
    """The first action call as written (after box tokens were stripped)."""


@dataclass(frozen=True)
class _Call:
    name: str
    args: dict[str, str]
    source: str


def smart_resize(
    height: int,
    width: int,
    *,
    factor: int = IMAGE_FACTOR,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> tuple[int, int]:
    """``(height, width)`` of the image Qwen2.5-VL / UI-TARS-1.5 sees (the package's own)."""
    h, w = _pkg_smart_resize(height, width, factor=factor, min_pixels=min_pixels,
                             max_pixels=max_pixels)
    return int(h), int(w)


def _clamp(value: float, size: int) -> int:
    return min(max(round(value), 0), size - 1)


def _norm_to_screen(nx: float, ny: float, screen_w: int, screen_h: int) -> tuple[int, int]:
    return _clamp(nx * screen_w, screen_w), _clamp(ny * screen_h, screen_h)


def model_to_screen(
    x: float,
    y: float,
    screen_w: int,
    screen_h: int,
    *,
    image_w: int | None = None,
    image_h: int | None = None,
    max_pixels: int = MAX_PIXELS,
    min_pixels: int = MIN_PIXELS,
) -> tuple[int, int]:
    """Map a UI-TARS-1.5 point (pixels of the smart-resized screenshot) to screen pixels.

    The screenshot defaults to the screen's size; the result is clamped to the screen.
    """
    rh, rw = smart_resize(image_h or screen_h, image_w or screen_w,
                          min_pixels=min_pixels, max_pixels=max_pixels)
    return _norm_to_screen(x / rw, y / rh, screen_w, screen_h)


# --- text -> thought + first call -------------------------------------------------------------


def _clean(text: str) -> str:
    for token in _BOX_TOKENS:
        text = text.replace(token, "")
    text = convert_point_to_coordinates(text) if "<point>" in text else text.strip()
    return text.replace("[EOS]", "").strip()


def _split(text: str) -> tuple[str | None, str]:
    """(thought, text from the first action call on)."""
    if _CALL_START.match(text) and not text.lstrip().startswith(("Thought", "Action")):
        return None, text
    m = _ACTION_LINE.search(text) or _ACTION_ANY.search(text)
    if m is None:
        raise ActionParseError("no 'Action:' in the output", text)
    head = text[: m.start()].strip()
    thought = _THOUGHT_PREFIX.sub("", head).strip() if head else None
    return thought or None, text[m.end():]


def _scan_quoted(s: str, i: int) -> tuple[str, int]:
    """Raw inner text of the string literal opening at ``s[i]`` and the index after it.

    A quote closes the literal only when a ``)``, another ``name=`` or the end follows, so an
    unescaped apostrophe inside ``content`` stays text.
    """
    quote, j, out = s[i], i + 1, []
    while j < len(s):
        c = s[j]
        if c == "\\" and j + 1 < len(s):
            out.append(s[j : j + 2])
            j += 2
            continue
        if c == quote and _CLOSES.match(s, j + 1):
            return "".join(out), j + 1
        out.append(c)
        j += 1
    raise ActionParseError("unterminated string in the action", s)


def _scan_call(s: str) -> _Call:
    m = _CALL_START.match(s)
    if m is None:
        raise ActionParseError("the action is not a call like click(start_box='(x,y)')", s)
    name, i = m.group(1), m.end()
    args: dict[str, str] = {}
    while True:
        while i < len(s) and s[i].isspace():
            i += 1
        if i >= len(s) or s[i] == ")":  # a missing final ')' (truncated output) is tolerated
            end = min(i + 1, len(s))
            return _Call(name=name, args=args, source=s[m.start():end].strip())
        km = _KWARG.match(s, i)
        if km is None:
            raise ActionParseError(f"bad argument list in {name}(...)", s)
        key, i = km.group(1), km.end()
        if i < len(s) and s[i] in "'\"":
            value, i = _scan_quoted(s, i)
        else:
            vm = _BARE_VALUE.match(s, i)
            assert vm is not None  # the pattern matches the empty string
            value, i = vm.group(0).strip(), vm.end()
        args[_ALIASES.get(key, key)] = value
        while i < len(s) and s[i].isspace():
            i += 1
        if i < len(s) and s[i] == ",":
            i += 1


def _unescape(raw: str) -> str:
    """Decode ``\\'``, ``\\"``, ``\\n``, ``\\t``, ``\\\\`` once; other backslashes stay."""
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw) and raw[i + 1] in _ESCAPES:
            out.append(_ESCAPES[raw[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


# --- call -> typed action ---------------------------------------------------------------------


def _box(call: _Call, key: str, text: str) -> tuple[float, ...]:
    raw = call.args.get(key)
    if raw is None:
        raise ActionParseError(f"{call.name}() needs {key}", text)
    nums = tuple(float(n) for n in _NUMBER.findall(raw))
    if len(nums) not in (2, 4):
        raise ActionParseError(f"{key} must be (x,y) or (x1,y1,x2,y2), got {raw!r}", text)
    return nums


def _normalised(call: _Call, keys: list[str], text: str, geom: dict[str, int]) -> list[tuple]:
    """Centres of the boxes ``keys`` of ``call`` in 0..1, through the ui-tars package."""
    boxes = {k: _box(call, k, text) for k in keys}
    canon = ", ".join(
        f"{k}='(" + ",".join(f"{v:g}" for v in b) + ")'" for k, b in boxes.items()
    )
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the package prints on failures
            out = parse_action_to_structure_output(
                f"Action: {call.name}({canon})", 1000, geom["image_h"], geom["image_w"],
                model_type="qwen25vl", max_pixels=geom["max_pixels"],
                min_pixels=geom["min_pixels"])
        inputs: dict[str, Any] = out[0]["action_inputs"]
        result = []
        for k in keys:
            x1, y1, x2, y2 = (float(v) for v in inputs[k].strip("[]").split(","))
            result.append(((x1 + x2) / 2, (y1 + y2) / 2))
    except (ValueError, AssertionError, KeyError, IndexError) as exc:
        raise ActionParseError(f"cannot read the boxes of {call.name}(): {exc}", text) from exc
    return result


def _keys(raw: str) -> list[str]:
    return [k for k in re.split(r"[\s+]+", _unescape(raw).strip()) if k]


def _to_action(call: _Call, text: str, geom: dict[str, int]) -> Action:
    name, args = call.name.lower(), call.args
    sw, sh = geom["screen_w"], geom["screen_h"]
    if name in _POINTER:
        ((nx, ny),) = _normalised(call, ["start_box"], text, geom)
        x, y = _norm_to_screen(nx, ny, sw, sh)
        return _POINTER[name](x=x, y=y)
    if name in ("drag", "select"):
        (ax, ay), (bx, by) = _normalised(call, ["start_box", "end_box"], text, geom)
        x1, y1 = _norm_to_screen(ax, ay, sw, sh)
        x2, y2 = _norm_to_screen(bx, by, sw, sh)
        return Drag(x1=x1, y1=y1, x2=x2, y2=y2)
    if name == "scroll":
        direction = _unescape(args.get("direction", "")).strip().lower()
        if direction not in ("up", "down", "left", "right"):
            raise ActionParseError(f"scroll direction must be up/down/left/right, "
                                   f"got {direction!r}", text)
        if "start_box" not in args:
            return Scroll(direction=direction)
        ((nx, ny),) = _normalised(call, ["start_box"], text, geom)
        x, y = _norm_to_screen(nx, ny, sw, sh)
        return Scroll(x=x, y=y, direction=direction)
    if name == "type":
        return TypeText(text=_unescape(args.get("content", "")))
    if name in ("hotkey", "press", "keydown"):
        keys = _keys(args.get("key", args.get("keys", "")))
        if not keys:
            raise ActionParseError(f"{name}() needs a key", text)
        if name != "hotkey" and len(keys) == 1:
            return Press(key=keys[0])
        return Hotkey(keys=keys)
    if name == "wait":
        return Wait(seconds=WAIT_SECONDS)
    if name == "finished":
        content = _unescape(args.get("content", "")).strip()
        return Done(message=content or None)
    if name == "call_user":
        return Fail(reason="call_user")
    raise ActionParseError(f"unknown action {call.name!r}", text)


def parse_uitars(
    text: str,
    screen_w: int,
    screen_h: int,
    *,
    image_w: int | None = None,
    image_h: int | None = None,
    max_pixels: int = MAX_PIXELS,
    min_pixels: int = MIN_PIXELS,
) -> ParsedOutput:
    """Parse UI-TARS-1.5 output (``Thought: ...\\nAction: ...``, ``Action: ...`` or a bare
    call) into its thought and the first action, in pixels of a ``screen_w x screen_h`` screen.

    ``image_w``/``image_h`` give the screenshot's size when it differs from the screen's.
    Raises :class:`ActionParseError` when no action can be read.
    """
    if screen_w < 1 or screen_h < 1:
        raise ValueError("screen size must be positive")
    geom = {"screen_w": screen_w, "screen_h": screen_h, "image_w": image_w or screen_w,
            "image_h": image_h or screen_h, "max_pixels": max_pixels, "min_pixels": min_pixels}
    try:
        cleaned = _clean(text)
        if not cleaned:
            raise ActionParseError("empty output", text)
        thought, rest = _split(cleaned)
        call = _scan_call(rest)
        action = _to_action(call, text, geom)
    except ActionParseError as exc:  # always report the text exactly as given
        raise ActionParseError(exc.message, text) from None
    except ValueError as exc:  # pydantic validation of the action
        raise ActionParseError(f"invalid action: {exc}", text) from exc
    return ParsedOutput(thought=thought, action=action, action_text=call.source)
