"""Waiting on an application's state in setup steps: the one polling loop the adapters share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, timeout: float, *, app: str,
             not_yet: tuple[type[Exception], ...] = (), poll_s: float = 0.2) -> T:
    """``probe()``'s first truthy value; :class:`TimeoutError` naming ``app`` and ``what``
    after ``timeout`` seconds. An exception of ``not_yet`` counts as not yet (an application
    still starting); the last one is named on timeout."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        try:
            value = probe()
        except not_yet as exc:
            value, last = None, str(exc)
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{app}: timed out after {timeout:g} s waiting for {what}"
                               + (f" (last: {last})" if last else ""))
        time.sleep(poll_s)
