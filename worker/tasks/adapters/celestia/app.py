"""Talking to Celestia through the guest agent's ``/coda/celestia`` route (the fork's dump
server listens on the desktop's loopback only), waiting on its state, and finding its main
window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from coda.contracts.desktop import CelestiaRequest, WindowInfo
from worker.providers.client import GuestError
from worker.tasks import polling
from worker.tasks.context import TaskContext

POLL_S = 0.2
MAIN_TITLE = "Celestia"
SPLASH_MAX_SIDE = 700  # the splash image is 674 x 491, a fresh main window 800 x 600

T = TypeVar("T")


class Unreadable(RuntimeError):
    """Celestia's state cannot be reached (no Celestia answering, an agent without the
    route)."""


class DumpError(RuntimeError):
    """Celestia answered, but not with a dump (an entity it does not know)."""


def call(ctx: TaskContext, op: str, query: list[dict[str, Any]] | None = None,
         timeout_s: float = 20.0) -> Any:
    request = CelestiaRequest.model_validate({"port": ctx.layout.portlike, "op": op,
                                              "query": query or [], "timeout_s": timeout_s})
    try:
        reply = ctx.guest.celestia(request)
    except GuestError as exc:
        if exc.status == 502:
            raise DumpError(f"Celestia's dump ({op}): {exc.detail[:300]}") from exc
        if exc.status in (404, 405, 503, 504):
            raise Unreadable(f"Celestia's state ({op}): {exc.detail[:300]}") from exc
        raise
    return reply.result


def dump(ctx: TaskContext, query: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    state = call(ctx, "dump", query)
    if not isinstance(state, dict):
        raise DumpError(f"the state dump is not an object: {str(state)[:200]}")
    return state


def version(ctx: TaskContext) -> str | None:
    """The dump server's version, None while nothing answers."""
    try:
        return str(call(ctx, "version", timeout_s=5.0))
    except Unreadable:
        return None


def is_main_window(window: WindowInfo) -> bool:
    """Celestia's main window (pure): titled Celestia, larger than the splash screen."""
    return (window.title.strip() == MAIN_TITLE
            and max(window.width, window.height) > SPLASH_MAX_SIDE)


def main_window(ctx: TaskContext) -> WindowInfo | None:
    return next((w for w in ctx.guest.windows() or [] if is_main_window(w)), None)


def wait_for(probe: Callable[[], T | None], what: str, timeout: float) -> T:
    """``probe()``'s first truthy value; :class:`TimeoutError` naming ``what`` after
    ``timeout`` seconds (an unreachable Celestia counts as not yet)."""
    return polling.wait_for(probe, what, timeout, app="Celestia",
                            not_yet=(Unreadable, DumpError), poll_s=POLL_S)
