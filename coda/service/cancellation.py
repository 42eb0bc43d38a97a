"""A per-request cancel signal that code running in threads can see.

The request pipeline (:class:`coda.service.middleware.RequestLimits`) sets a fresh
:class:`threading.Event` for each request and sets it when the client disconnects or the
request passes its deadline. ``asyncio.to_thread`` copies the context, so a blocking loop
(e.g. a transformers ``generate`` stopping criterion) reads it with :func:`current_cancel_event`.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar

_event: ContextVar[threading.Event | None] = ContextVar("coda_cancel_event", default=None)


def current_cancel_event() -> threading.Event:
    """The current request's cancel event (a never-set one outside a request)."""
    event = _event.get()
    return event if event is not None else threading.Event()


def is_cancelled() -> bool:
    event = _event.get()
    return event is not None and event.is_set()


def bind_cancel_event(event: threading.Event) -> object:
    """Make ``event`` the current one; returns the token for :func:`reset_cancel_event`."""
    return _event.set(event)


def reset_cancel_event(token: object) -> None:
    _event.reset(token)  # type: ignore[arg-type]
