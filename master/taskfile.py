"""An uploaded task file -> task documents, refusing what Postgres could not store or what is
not standard JSON: not UTF-8, NaN / Infinity / numbers overflowing to infinity, a NUL character
or a lone surrogate in a string or key, nesting deeper than ``MAX_DEPTH``."""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64  # task documents are a few levels deep


class TaskFileError(ValueError):
    """An uploaded task file that cannot be read; ``loc`` is the path inside the file."""

    def __init__(self, msg: str, *, loc: tuple[int | str, ...] = (),
                 kind: str = "json_invalid") -> None:
        super().__init__(msg)
        self.loc = loc
        self.kind = kind


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _bad_text(s: str) -> str | None:
    if "\x00" in s:
        return "a NUL character (\\u0000) cannot be stored"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "a lone surrogate (\\ud800-\\udfff) is not text"
    return None


def check_value(value: Any, loc: tuple[int | str, ...] = ()) -> None:
    """Walk a parsed JSON value (iteratively): depth, NUL characters, lone surrogates."""
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(value, loc)]
    while stack:
        v, at = stack.pop()
        if len(at) - len(loc) > MAX_DEPTH:
            raise TaskFileError(f"nested deeper than {MAX_DEPTH} levels", loc=at[:len(loc) + 3])
        if isinstance(v, str):
            if (why := _bad_text(v)) is not None:
                raise TaskFileError(why, loc=at, kind="string_invalid")
        elif isinstance(v, dict):
            for k, item in v.items():
                if (why := _bad_text(k)) is not None:
                    raise TaskFileError(f"key: {why}", loc=at, kind="string_invalid")
                stack.append((item, (*at, k)))
        elif isinstance(v, list):
            stack.extend((item, (*at, i)) for i, item in enumerate(v))


def loads(text: str, loc: tuple[int | str, ...] = ()) -> Any:
    """Strict ``json.loads``: standard JSON only, checked with :func:`check_value`."""
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise TaskFileError(f"not valid JSON: {exc.msg} (line {exc.lineno})", loc=loc) from exc
    except RecursionError as exc:
        raise TaskFileError(f"not valid JSON: nested deeper than {MAX_DEPTH} levels",
                            loc=loc) from exc
    except ValueError as exc:  # NaN, Infinity, 1e400, a 5000-digit integer
        raise TaskFileError(f"not valid JSON: {exc}", loc=loc) from exc
    check_value(value, loc)
    return value


def read_task_file(raw: bytes, *, jsonl: bool) -> list[Any]:
    """The documents of a task file: a JSON object, a JSON list, or JSON lines."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFileError(f"not UTF-8 text (byte {exc.start})", kind="encoding") from exc
    if jsonl:
        return [loads(line, (f"line {n}",))
                for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    parsed = loads(text)
    return parsed if isinstance(parsed, list) else [parsed]
