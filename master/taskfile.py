"""An uploaded task file -> task documents: UTF-8, one JSON document or JSON lines, each
strict JSON (:func:`coda.service.strict_loads`: no NaN / Infinity / 1e400, no NUL or lone
surrogate, nesting bounded), as a JSON request body is."""

from __future__ import annotations

from typing import Any

from coda.service import FieldError, strict_loads
from coda.service.jsonguard import JSONBodyError, text_problem

FILE = ("body", "file")


def read_task_file(raw: bytes, *, jsonl: bool) -> list[Any]:
    """The documents of a task file: a JSON object, a JSON list, or JSON lines; a
    :class:`FieldError` (422) naming where in the file it went wrong otherwise."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FieldError(FILE, f"file: not UTF-8 text (byte {exc.start})",
                         kind="encoding") from exc
    try:
        if jsonl:
            return [strict_loads(line, (*FILE, f"line {n}"))
                    for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        parsed = strict_loads(text, FILE)
    except JSONBodyError as exc:
        raise FieldError(exc.loc, f"file: {exc.message}", kind=exc.kind) from exc
    return parsed if isinstance(parsed, list) else [parsed]


def check_text(loc: tuple[str, ...], value: str | None) -> str | None:
    """A form field or file name that Postgres could store, or a 422 naming it."""
    if value is not None and (problem := text_problem(value)) is not None:
        raise FieldError(loc, f"{loc[-1]}: {problem}", kind="string_invalid")
    return value
