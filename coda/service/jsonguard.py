"""Strict JSON for request bodies: only what RFC 8259 allows, and only text Postgres can store.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` and turns ``1e400`` into an
infinite float; neither can be echoed back as standard JSON nor stored. A NUL character
(``\\u0000``) is valid JSON but Postgres refuses it in ``text`` and ``jsonb``, and a lone UTF-16
surrogate (``"\\ud800"``) is valid JSON syntax but not Unicode text at all. :func:`strict_loads`
refuses all of these with a :class:`JSONBodyError` that names where the bad value sits.
"""

from __future__ import annotations

import json
import math
from typing import Any

Loc = tuple[str | int, ...]
MAX_DEPTH = 64
"""Nesting depth of arrays and objects accepted in a body (no CODA contract nests deeper)."""


class JSONBodyError(ValueError):
    """A body that is not strict JSON; ``loc`` is the path of the bad value (FastAPI style,
    starting with ``"body"``) and ``kind`` the error type reported to the client."""

    def __init__(self, loc: Loc, message: str, kind: str = "json_invalid") -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message
        self.kind = kind

    def to_error(self) -> dict[str, Any]:
        return {"loc": list(self.loc), "msg": self.message, "type": self.kind}


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range (numbers must be finite)")
    return value


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as text (NUL, lone surrogate), or ``None``."""
    if "\x00" in text:
        return "must not contain NUL characters (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (lone surrogate)"
    return None


def _check_tree(value: Any, base: Loc) -> None:
    """Walk the parsed document (iteratively) for bad strings and excessive depth."""
    stack: list[tuple[Any, Loc]] = [(value, base)]
    while stack:
        node, loc = stack.pop()
        if len(loc) - len(base) > MAX_DEPTH:
            raise JSONBodyError(base, f"nesting deeper than {MAX_DEPTH} levels")
        if isinstance(node, str):
            problem = text_problem(node)
            if problem:
                raise JSONBodyError(loc, f"string {problem}", "string_invalid")
        elif isinstance(node, dict):
            for key, item in node.items():
                problem = text_problem(key)
                if problem:
                    raise JSONBodyError(loc, f"object key {problem}", "string_invalid")
                stack.append((item, (*loc, key)))
        elif isinstance(node, list):
            stack.extend((item, (*loc, i)) for i, item in enumerate(node))


def _needs_walk(raw: bytes | str) -> bool:
    """Whether the raw text can hold a bad string at all (escapes or CESU-8 surrogates) or
    deep nesting; a body without any is accepted after parsing alone."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return b"\\u" in data or b"\xed" in data or data.count(b"[") + data.count(b"{") > MAX_DEPTH


def strict_loads(raw: bytes | str, base: Loc = ("body",)) -> Any:
    """Parse ``raw`` as strict JSON or raise :class:`JSONBodyError` (see module doc)."""
    try:
        value = json.loads(raw, parse_constant=_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise JSONBodyError((*base, exc.pos), f"JSON decode error: {exc.msg}") from exc
    except RecursionError as exc:
        raise JSONBodyError(base, "JSON nested too deeply") from exc
    except (ValueError, UnicodeDecodeError) as exc:  # constants, huge numbers, bad encoding
        raise JSONBodyError(base, str(exc)) from exc
    if _needs_walk(raw):
        _check_tree(value, base)
    return value
