"""Talking to GRASS GIS's GUI through the guest agent's ``/coda/grass`` route, and waiting on
its state. The reader inside the GUI (:mod:`.wxgui_state`) is uploaded to the guest by
``launch`` and named as ``GRASS_PYTHON``."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from coda.contracts.desktop import GrassOp, GrassRequest
from worker.providers.client import GuestError
from worker.tasks import polling
from worker.tasks.context import TaskContext

READER = Path(__file__).with_name("wxgui_state.py")
GUEST_DIR = "/home/user/.coda/grass"
READER_PATH = f"{GUEST_DIR}/wxgui_state.py"
WRAPPER_PATH = f"{GUEST_DIR}/python"
SYSTEM_PYTHON = "/usr/bin/python3"
POLL_S = 0.2

T = TypeVar("T")


class Unreadable(RuntimeError):
    """The GUI's state cannot be reached (no GUI with the reader, or an agent without the
    route)."""


class GuiError(RuntimeError):
    """The reader answered, but the operation failed in the GUI."""


def call(ctx: TaskContext, op: GrassOp, *, timeout_s: float = 30.0, **args: Any) -> Any:
    """One operation of the reader; its result."""
    try:
        reply = ctx.guest.grass(GrassRequest(op=op, args=args, timeout_s=timeout_s))
    except GuestError as exc:
        if exc.status in (404, 405, 502, 503, 504):
            raise Unreadable(f"GRASS GIS's GUI state ({op}): {exc.detail[:300]}") from exc
        raise
    if not reply.ok:
        raise GuiError(f"GRASS GIS's GUI could not {op}: {str(reply.error)[:500]}")
    return reply.result


def wait_for(probe: Callable[[], T | None], what: str, timeout: float) -> T:
    """``probe()``'s first truthy value; :class:`TimeoutError` naming ``what`` after
    ``timeout`` seconds (an unreachable GRASS GIS's GUI counts as not yet)."""
    return polling.wait_for(probe, what, timeout, app="GRASS GIS", not_yet=(Unreadable, GuiError),
                            poll_s=POLL_S)


def install_reader(ctx: TaskContext) -> str:
    """Upload the reader and its ``GRASS_PYTHON`` wrapper; the wrapper's guest path."""
    reader, wrapper = ctx.rw(READER_PATH), ctx.rw(WRAPPER_PATH)
    ctx.guest.upload(reader, READER.read_bytes())
    script = f'#!/bin/sh\nexec {SYSTEM_PYTHON} {shlex.quote(reader)} "$@"\n'
    ctx.guest.upload(wrapper, script.encode())
    done = ctx.guest.execute(["chmod", "0755", wrapper])
    if done.returncode not in (0, None):
        raise GuiError(f"chmod {wrapper}: {done.error}")
    return wrapper


def ready(ctx: TaskContext) -> dict[str, Any] | None:
    """The GUI's readiness when the Layer Manager, a map display and the data catalog are up."""
    state = call(ctx, GrassOp.READY)
    ok = isinstance(state, dict) and all(state.get(k) for k in ("frame", "display", "catalog"))
    return state if ok else None


def dump(ctx: TaskContext) -> dict[str, Any]:
    state = call(ctx, GrassOp.DUMP)
    if not isinstance(state, dict):
        raise GuiError(f"the state dump is not an object: {str(state)[:200]}")
    return state
