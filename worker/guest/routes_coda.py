"""What this agent adds to OSWorld's protocol: readiness, typed actions, the window list and
closing everything it started (a soft reset)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict

from coda.actions import Action, Wait, to_pyautogui
from coda.contracts.desktop import (
    ActResult,
    CloseAppsReply,
    GuestHealth,
    PopupInfo,
    WindowInfo,
)
from coda.guestenv import DESKTOP_MARK
from coda.logging import get_logger
from worker import __version__
from worker.guest import commands
from worker.guest.capture import DisplayUnavailable
from worker.guest.home import HomeTemplateMissing, restore_home
from worker.guest.responses import TEXT_OK, guest_errors
from worker.guest.runner import ActionFailed, ActionTimeout
from worker.guest.state import StateDep

AGENT_NAME = "coda-guest"
health_router = APIRouter(tags=["coda"])
router = APIRouter(prefix="/coda", tags=["coda"])
log = get_logger("worker.guest")


class ActBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Action


@health_router.get("/health", response_model=GuestHealth, responses={
    503: {"model": GuestHealth, "description": "the X display is unavailable"}})
def health(state: StateDep) -> Any:
    """Readiness (no token needed): the agent answers and its X display is up."""
    try:
        w, h = state.x.screen_size()
    except DisplayUnavailable as exc:
        log.warning("guest.display_unavailable", route="health", error=str(exc))
        down = GuestHealth(status="x_unavailable", agent=AGENT_NAME, version=__version__,
                           detail=str(exc))
        return JSONResponse(down.model_dump(mode="json"), status_code=503)
    return GuestHealth(status="ok", agent=AGENT_NAME, version=__version__, width=w, height=h)


@router.post("/act")
def act(body: ActBody, state: StateDep) -> ActResult:
    """Perform one typed action (``coda.actions``) with a bound on its time."""
    start = time.perf_counter()
    action = body.action
    limit = state.settings.action_timeout_s
    if isinstance(action, Wait):
        limit = max(limit, action.seconds + 5)
    try:
        state.runner.run(to_pyautogui(action), timeout=limit)
        error = None
    except (ActionFailed, ActionTimeout) as exc:
        error = str(exc)
    return ActResult(ok=error is None, elapsed_ms=(time.perf_counter() - start) * 1000,
                     error=error)


@router.get("/windows")
def windows(state: StateDep) -> list[WindowInfo]:
    """Top-level windows the window manager lists."""
    return state.x.windows()


@router.get("/popups")
def popups(state: StateDep) -> list[PopupInfo]:
    """Menus, drop-downs and tooltips on screen now: windows the window manager does not list
    (a scripted user waits for a context menu before it types into it)."""
    return state.x.popups()


@router.post("/close_apps")
def close_apps(state: StateDep) -> CloseAppsReply:
    """Kill every process this agent started (and what they spawned); list what is left."""
    killed = commands.kill_marked(state.env[DESKTOP_MARK])
    return CloseAppsReply(killed=killed, windows=state.x.windows())


@router.post("/restore", response_model=None,
             responses={**TEXT_OK, **guest_errors(500, 503)})
def restore(state: StateDep) -> Response:
    """Make the home a fresh copy of the configured template and empty what the desktop user
    left in the temporary directories, as this agent's user, after :func:`close_apps`: the
    docker provider's fast reset without a ``docker exec`` (which costs the engine ~0.06
    CPU-seconds a reset)."""
    template = state.settings.home_template
    if template is None:
        return JSONResponse({"status": "error", "message": "no home template configured "
                             "(CODA_GUEST_HOME_TEMPLATE)"}, status_code=503)
    try:
        restore_home(template, Path.home())
    except (HomeTemplateMissing, OSError) as exc:
        log.warning("guest.restore_failed", error=str(exc))
        return JSONResponse({"status": "error", "message": f"restore: {exc}"}, status_code=500)
    return PlainTextResponse("OK")
