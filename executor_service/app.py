"""The executor service app: ``POST /v1/act`` and ``POST /v1/act/batch`` over UI-TARS-1.5."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI

from coda.contracts.services_api import (
    ActBatchRequest,
    ActBatchResponse,
    ActRequest,
    ActResult,
    HistoryStep,
)
from coda.inference.base import ChatBackend, PromptTooLong
from coda.logging import get_logger
from coda.modelservice.app import (
    INFERENCE,
    ROUTE_ERRORS,
    check_max_tokens,
    create_model_app,
    get_state,
    too_long,
)
from coda.modelservice.state import ModelState
from executor_service import logic
from executor_service.settings import ExecutorSettings

log = get_logger("executor_service")

StateDep = Annotated[ModelState, Depends(get_state)]
router = APIRouter(prefix="/v1", tags=["executor"])


def _texts(instruction: str, thoughts: list[str], history: list[HistoryStep],
           thought_loc: str) -> list[tuple[tuple[str | int, ...], str | None]]:
    locs: list[tuple[tuple[str | int, ...], str | None]] = [(("body", "instruction"), instruction)]
    locs += [(("body", thought_loc, i) if thought_loc == "thoughts" else ("body", thought_loc), t)
             for i, t in enumerate(thoughts)]
    locs += [(("body", "history", i, "thought"), h.thought) for i, h in enumerate(history)]
    return locs


async def _act(state: ModelState, req: ActRequest | ActBatchRequest, thoughts: list[str],
               thought_loc: str) -> list[ActResult]:
    check_max_tokens(req.sampling, state)
    settings = state.settings
    assert isinstance(settings, ExecutorSettings)
    try:
        return await logic.act_many(
            state.backend(), settings, state.reader, instruction=req.instruction,
            thoughts=thoughts, screenshot=req.screenshot, history=req.history,
            screen_w=req.screen_width, screen_h=req.screen_height, sampling=req.sampling)
    except PromptTooLong as exc:
        raise too_long(exc, _texts(req.instruction, thoughts, req.history, thought_loc)) from None


@router.post("/act", dependencies=INFERENCE, responses=ROUTE_ERRORS)
async def act(req: ActRequest, state: StateDep) -> ActResult:
    """Ground one planner thought into one action on the given screenshot."""
    (result,) = await _act(state, req, [req.thought], "thought")
    log.info("executor.act", action=result.action.type if result.action else None,
             parse_error=result.error is not None, latency_ms=round(result.latency_ms, 1))
    return result


@router.post("/act/batch", dependencies=INFERENCE, responses=ROUTE_ERRORS)
async def act_batch(req: ActBatchRequest, state: StateDep) -> ActBatchResponse:
    """Ground G thoughts on one state in one backend call (GRPO groups)."""
    start = time.perf_counter()
    resp = logic.batch_response(await _act(state, req, req.thoughts, "thoughts"), start)
    log.info("executor.act_batch", g=len(req.thoughts),
             parse_errors=sum(r.error is not None for r in resp.results),
             latency_ms=round(resp.latency_ms, 1))
    return resp


def create_app(settings: ExecutorSettings | None = None,
               backend: ChatBackend | None = None) -> FastAPI:
    """The executor app; without ``backend`` one is built from ``settings`` after startup."""
    cfg = settings or ExecutorSettings()
    state = ModelState(cfg, {"executor": cfg.spec()},
                       {"executor": backend} if backend is not None else None)
    return create_model_app(
        state, name="coda-executor",
        description="Planner thought + screenshot -> one GUI action (UI-TARS-1.5).",
        routers=[router])
