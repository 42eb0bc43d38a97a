"""A replay backend: recorded model outputs served at the backend seam.

For tests and benchmarks that must succeed deterministically (a task solved end to end, the
worker's own overhead measured without inference), the planner and executor services run with
this backend instead of a model; everything around it (prompt building, image reading, parsing,
HTTP, the worker, the desktop) stays real.

A replay file is JSON::

    {"name": "texstudio C-02 planner",
     "entries": [{"turn": 0, "contains": "lambda", "outputs": ["Thought: ...\\nAction: ..."]},
                 ...],
     "default": null}

A script may ``include`` other replay files (paths relative to it): their entries follow its
own, so one script can answer several recorded tasks (``examples/replays/demo.*.json``).

The entry answering a request is the first whose ``turn`` (when given) equals the number of
past assistant turns in the messages (a final assistant message being continued does not count),
whose ``contains`` (when given) occurs in the messages' text, whose ``contains_all`` (when given)
occur in it in that order (a judge's verdict keyed by the actions of a whole trajectory, whatever
the thoughts between them say) and whose ``final_contains`` (when given) occurs in the text of
the last message alone: the one being answered, or the executor's pre-filled thought it
continues, so an executor output can be keyed by the plan it is given whatever the history
holds. Its ``outputs`` are handed out
in order and repeated to make ``n`` completions. No matching entry: ``default`` when set, else a
:class:`~coda.inference.base.BackendError` (the service answers 502).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coda.inference.base import BackendError, ChatMessage, Completion, GenerateOptions


class ReplayEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn: int | None = Field(default=None, ge=0, description="past assistant turns")
    contains: str | None = Field(default=None, min_length=1,
                                 description="text that must occur in the messages")
    contains_all: list[str] | None = Field(
        default=None, min_length=1,
        description="texts that must occur in the messages, in this order")
    final_contains: str | None = Field(default=None, min_length=1,
                                       description="text that must occur in the last message")
    outputs: list[str] = Field(min_length=1)


class ReplayScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "replay"
    entries: list[ReplayEntry] = Field(default_factory=list)
    default: str | None = Field(default=None, description="answer when no entry matches")
    include: list[str] = Field(default_factory=list,
                               description="replay files whose entries follow these "
                                           "(relative to this file)")


class ReplayFileError(ValueError):
    """The replay file is missing or not a replay script."""


def load_script(path: str | Path, *, _seen: frozenset[Path] = frozenset()) -> ReplayScript:
    """The script of ``path`` with the entries of the files it includes after its own."""
    p = Path(path).resolve()
    if p in _seen:
        raise ReplayFileError(f"replay file {p} includes itself")
    try:
        script = ReplayScript.model_validate(json.loads(p.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise ReplayFileError(f"replay file {p} does not exist") from None
    except (ValueError, ValidationError) as exc:
        raise ReplayFileError(f"replay file {p} is not a replay script: {exc}") from None
    for name in script.include:
        script.entries += load_script(p.parent / name, _seen=_seen | {p}).entries
    return script


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return ""


def past_turns(messages: list[ChatMessage], *, continuing: bool) -> int:
    """Assistant turns before the one being generated (pure)."""
    turns = sum(1 for m in messages if m.get("role") == "assistant")
    if continuing and messages and messages[-1].get("role") == "assistant":
        turns -= 1
    return turns


def in_order(parts: list[str], text: str) -> bool:
    """Whether every part occurs in ``text``, each after the end of the one before (pure)."""
    at = 0
    for part in parts:
        found = text.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


def choose(script: ReplayScript, messages: list[ChatMessage], *,
           continuing: bool) -> list[str] | None:
    """The outputs answering ``messages`` (pure), or None."""
    turn = past_turns(messages, continuing=continuing)
    text = "\n".join(_text(m.get("content")) for m in messages)
    final = _text(messages[-1].get("content")) if messages else ""
    for entry in script.entries:
        if entry.turn is not None and entry.turn != turn:
            continue
        if entry.contains is not None and entry.contains not in text:
            continue
        if entry.final_contains is not None and entry.final_contains not in final:
            continue
        if entry.contains_all is not None and not in_order(entry.contains_all, text):
            continue
        return entry.outputs
    return [script.default] if script.default is not None else None


class ReplayBackend:
    """Serves a :class:`ReplayScript`; implements :class:`~coda.inference.base.ChatBackend`."""

    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.script = load_script(path)
        self.calls = 0
        self._adapters: dict[str, str] = {}

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        self.calls += 1
        outputs = choose(self.script, messages, continuing=options.continue_final_message)
        if outputs is None:
            turn = past_turns(messages, continuing=options.continue_final_message)
            raise BackendError(f"replay {self.script.name!r}: no recorded output for turn {turn}")
        texts = [outputs[i % len(outputs)] for i in range(options.n)]
        return [Completion(text=t, prompt_tokens=0, completion_tokens=len(t.split()),
                           finish_reason="stop", adapter=options.adapter) for t in texts]

    async def load_adapter(self, version: str, path: str) -> None:
        self._adapters[version] = path  # a version name only: outputs do not change

    async def unload_adapter(self, version: str) -> None:
        self._adapters.pop(version, None)

    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    async def ready(self) -> dict[str, Any]:
        return {"backend": self.name, "script": self.script.name,
                "entries": len(self.script.entries)}

    async def aclose(self) -> None:
        return None
