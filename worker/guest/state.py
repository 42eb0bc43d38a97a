"""What every route of the agent shares, and the token check."""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from worker.guest import commands
from worker.guest.capture import ScreenCapture
from worker.guest.runner import ActionRunner
from worker.guest.settings import GuestSettings
from worker.guest.xsession import XSession, ensure_xauthority


@dataclass
class GuestState:
    settings: GuestSettings
    capture: ScreenCapture
    x: XSession
    runner: ActionRunner
    env: dict[str, str]
    a11y_depth: int = 50
    extra: dict[str, object] = field(default_factory=dict)

    @classmethod
    def create(cls, settings: GuestSettings) -> GuestState:
        if settings.display:
            os.environ["DISPLAY"] = settings.display
        ensure_xauthority()
        display = os.environ.get("DISPLAY")
        env = commands.child_env(settings.desktop_id, settings.app_env)
        return cls(settings=settings, capture=ScreenCapture(display), x=XSession(display),
                   runner=ActionRunner(os.environ), env=env)

    def close(self) -> None:
        self.runner.close()
        self.capture.close()


def get_state(request: Request) -> GuestState:
    state: GuestState = request.app.state.guest
    return state


StateDep = Annotated[GuestState, Depends(get_state)]


def _presented_token(request: Request) -> str | None:
    """A bearer token, or the password of HTTP Basic auth (so an unchanged OSWorld client can
    carry the token in its URL: ``http://coda:<token>@host:5000``)."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip()).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return None
    return None


def require_token(request: Request, state: StateDep) -> None:
    expected = state.settings.token
    if expected is None and state.settings.throwaway_local_display:
        return
    presented = _presented_token(request)
    if expected is None or presented is None or not secrets.compare_digest(
            presented.encode(), expected.get_secret_value().encode()):
        raise HTTPException(401, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})
