"""Shutdown as request handlers see it: an event set the moment the process is asked to stop.

uvicorn answers SIGTERM / SIGINT by waiting for open requests to finish and only then runs the
lifespan's shutdown, so a lease long poll (up to 60 s) would hold the whole shutdown. The
handler installed here runs first, sets the event (the long poll returns at once, with no job)
and hands the signal on to the handler it replaced (uvicorn's)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT)


def set_on_signals(event: asyncio.Event) -> Callable[[], None]:
    """Chain a handler that sets ``event`` before the current SIGTERM/SIGINT handlers; returns
    the function that puts them back. Does nothing outside the main thread (no signals there)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    replaced: dict[int, Callable[[int, FrameType | None], object] | int | None] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(event.set)
        before = replaced.get(signum)
        if callable(before):
            before(signum, frame)
        elif before == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    for sig in SIGNALS:
        replaced[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, before in replaced.items():
            if signal.getsignal(sig) is handler and before is not None:
                signal.signal(sig, before)

    return restore
