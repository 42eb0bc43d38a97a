"""The status page (HTML that refreshes itself) and the same data as JSON."""

from __future__ import annotations

import uuid
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from coda.contracts.master_api import StatusReport
from master import dashboard, status
from master.auth import Reader
from master.state import State

router = APIRouter(tags=["status"])
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parent.parent / "templates"))


@router.get("/v1/status")
async def status_json(core: State, _: Reader, batch_id: uuid.UUID | None = None) -> StatusReport:
    """Batches, Table-1 scores, workers, queue depths and recent episodes."""
    return await status.report(core, batch_id=batch_id)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard_page(request: Request, core: State, _: Reader,
                         batch_id: uuid.UUID | None = None, refresh: int = 5) -> HTMLResponse:
    """The dashboard: the data of ``/v1/status`` as a page that refreshes itself."""
    report = await status.report(core, batch_id=batch_id)
    return templates.TemplateResponse(request, "dashboard.html", {
        "report": report, "refresh": max(1, min(refresh, 300)), "batch_id": batch_id})


@router.get("/episodes/{episode_id}", response_class=HTMLResponse, include_in_schema=False)
async def replay_page(request: Request, episode_id: uuid.UUID, core: State,
                      _: Reader) -> HTMLResponse:
    """One episode step by step: screenshots, thoughts, actions, errors, verdict, rewards."""
    replay = await dashboard.replay(core.pg, episode_id)
    return templates.TemplateResponse(request, "replay.html",
                                      {"ep": replay.episode, "replay": replay})
