"""Pure parser of judge replies into :class:`coda.contracts.training.Vote`.

The reply must contain one JSON object with a boolean ``Correctness`` (captions before it
are fine, a ```json fence too). Anything else is a failed vote (``parsed=False``), which
voting counts as "not correct".
"""

from __future__ import annotations

import json
import re
from typing import Any

from coda.bounds import MAX_STEP_INDEX
from coda.contracts.training import Vote

_BOOLS = {"true": True, "false": False, "yes": True, "no": False}


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object embedded in ``text``, in order."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(obj, dict):
            found.append(obj)
    return found


def _key(obj: dict[str, Any], name: str) -> Any:
    wanted = name.lower().replace("_", "")
    for k, v in obj.items():
        if str(k).lower().replace("_", "").replace(" ", "") == wanted:
            return v
    return None


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _BOOLS.get(value.strip().lower())
    return None


def _as_step(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 1 <= value <= MAX_STEP_INDEX + 1 else None
    if isinstance(value, str) and value.strip().isdigit():
        return _as_step(int(value.strip()))
    return None


def _as_steps(value: Any) -> list[int]:
    items = value if isinstance(value, list) else [value] if value is not None else []
    steps = {s for s in (_as_step(v) for v in items) if s is not None}
    return sorted(steps)


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def parse_vote(raw: str, *, model: str, resolution: str = "high") -> Vote:
    """One judge reply -> a :class:`Vote`; the last object with a valid Correctness wins."""
    for obj in reversed(_json_objects(raw)):
        correctness = _as_bool(_key(obj, "Correctness"))
        if correctness is None:
            continue
        return Vote(
            model=model,
            resolution=resolution,
            raw=raw,
            parsed=True,
            correctness=correctness,
            redundant=_as_steps(_key(obj, "Redundant")),
            first_error_step=_as_step(_key(obj, "First_Error_Step")),
            error_type=_as_text(_key(obj, "Error_Type")),
            correct_action=_as_text(_key(obj, "Correct_Action")),
        )
    return Vote(model=model, resolution=resolution, raw=raw, parsed=False)


def parse_instruction_check(raw: str) -> tuple[bool, bool, bool, str | None, bool]:
    """(clear, executable, judgeable, reason, parsed); unparseable = all False, parsed False."""
    for obj in reversed(_json_objects(raw)):
        flags = [_as_bool(_key(obj, k)) for k in ("Clear", "Executable", "Judgeable")]
        if any(f is None for f in flags):
            continue
        clear, executable, judgeable = (bool(f) for f in flags)
        return clear, executable, judgeable, _as_text(_key(obj, "Reason")), True
    return False, False, False, None, False
