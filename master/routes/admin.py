"""Test-only administration: move this process's lease clock forward (:mod:`master.clock`).

Mounted only when ``CODA_TEST_CLOCK=true``, which the settings accept only with
``CODA_DEV=true``: a production master has no such route, and its OpenAPI does not list it."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from coda.logging import get_logger
from master.auth import Admin
from master.state import State

log = get_logger("coda.master.admin")
router = APIRouter(prefix="/v1/admin", tags=["admin (tests only)"])


class ClockAdvance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    advance_s: float = Field(ge=0, le=86_400, description="seconds to move the clock forward")


class ClockNow(BaseModel):
    now: datetime


@router.post("/clock")
async def advance_clock(body: ClockAdvance, core: State, _: Admin) -> ClockNow:
    """Move the lease clock of this process forward (leases expire, heartbeats age) without
    waiting. Tests only."""
    now = core.clock.advance(body.advance_s)
    log.warning("clock.advanced", advance_s=body.advance_s, now=now.isoformat())
    return ClockNow(now=now)
