"""What a checker's predicate compared: the value a task's ``key`` read is wrapped so that the
fields its ``pred`` reads are recorded (``key[0]['value']``, ``item['name']``), and a check's
detail names those fields and their values rather than the start of the whole value (a layer's
attributes start with temporary file paths, a console's output with its first lines)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

MAX_READS = 8
MAX_SHOWN = 160


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``value`` as JSON, cut to ``limit`` characters with its full length named."""
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


class Reads:
    """The fields read through the wrapped values, in order, each once."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def wrap(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return ReadDict(value, path, self)
        if isinstance(value, list):
            return ReadList(value, path, self)
        return value

    def read(self, path: str, value: Any) -> Any:
        if not isinstance(value, dict | list):
            self.seen.setdefault(path, value)
        return self.wrap(value, path)

    def describe(self) -> str:
        items = [f"{path} = {shown(value)}" for path, value in self.seen.items()]
        more = len(items) - MAX_READS
        return ", ".join(items[:MAX_READS]) + (f" (and {more} more)" if more > 0 else "")


class ReadDict(dict[Any, Any]):
    def __init__(self, data: dict[Any, Any], path: str, reads: Reads) -> None:
        super().__init__(data)
        self._path, self._reads = path, reads

    def __getitem__(self, key: Any) -> Any:
        return self._reads.read(f"{self._path}[{key!r}]", super().__getitem__(key))


class ReadList(list[Any]):
    def __init__(self, data: list[Any], path: str, reads: Reads) -> None:
        super().__init__(data)
        self._path, self._reads = path, reads

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return super().__getitem__(index)
        return self._reads.read(f"{self._path}[{index!r}]", super().__getitem__(index))

    def __iter__(self) -> Iterator[Any]:
        for index in range(len(self)):
            yield self[index]


def compared(pred: Any, got: Any, value: Any) -> tuple[bool, str]:
    """``pred(got, value)`` and what it read of ``got``: the fields it read, else ``got``
    itself (cut)."""
    reads = Reads()
    ok = bool(pred(reads.wrap(got, "key"), value))
    return ok, reads.describe() or f"key = {shown(got)}"
