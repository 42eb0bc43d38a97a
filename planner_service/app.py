"""The planner service: ``POST /v1/plan`` and the adapter routes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, status

from coda.contracts.services_api import (
    AdapterInfo,
    AdapterList,
    AdapterLoad,
    ImageRef,
    Plan,
    PlanRequest,
    PlanResponse,
)
from coda.inference.base import BackendError, ChatBackend, GenerateOptions
from coda.logging import get_logger
from coda.prompts.planner import PastStep, build_planner_messages
from coda.service import create_service_app
from planner_service.adapters import BASE, AdapterConflict, AdapterRegistry, UnknownAdapter
from planner_service.images import ImageError, data_url, load_image
from planner_service.parsing import parse_plan
from planner_service.settings import PlannerSettings

log = get_logger("planner_service")
VERSION = "0.1.0"


@dataclass
class PlannerState:
    settings: PlannerSettings
    backend: ChatBackend
    adapters: AdapterRegistry


def get_state(request: Request) -> PlannerState:
    state: PlannerState = request.app.state.planner
    return state


StateDep = Annotated[PlannerState, Depends(get_state)]
router = APIRouter(prefix="/v1", tags=["planner"])


def _field_error(exc: ImageError) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[
        {"loc": ["body", *exc.field], "msg": str(exc), "type": "value_error"}])


async def _image_url(image: ImageRef, field: tuple[str | int, ...], st: PlannerState) -> str:
    try:
        return data_url(await load_image(image, field, st.settings.artifacts_url))
    except ImageError as exc:
        raise _field_error(exc) from exc


async def build_messages(req: PlanRequest, st: PlannerState) -> list[dict[str, Any]]:
    """Resolve the request's screenshots and lay out the planner conversation."""
    keep = min(st.settings.keep_images, len(req.history), st.settings.max_turns)
    first_kept = len(req.history) - keep

    async def past(i: int) -> PastStep:
        shot = req.history[i].screenshot
        url = None
        if shot is not None and i >= first_kept:
            url = await _image_url(shot, ("history", i, "screenshot"), st)
        return PastStep(req.history[i].thought, url)

    history = await asyncio.gather(*(past(i) for i in range(len(req.history))))
    current = await _image_url(req.screenshot, ("screenshot",), st)
    previous = None
    if req.previous_screenshot is not None and keep > 0:
        previous = await _image_url(req.previous_screenshot, ("previous_screenshot",), st)
    return build_planner_messages(
        req.instruction, history, current, previous, answer_mode=req.answer_mode,
        max_turns=st.settings.max_turns, keep_images=st.settings.keep_images)


@router.post("/plan", response_model=PlanResponse)
async def plan(req: PlanRequest, st: StateDep) -> PlanResponse:
    """Sample ``n`` next-step plans, each tagged with the adapter version that wrote it."""
    start = time.perf_counter()
    try:
        adapter = st.adapters.resolve(req.adapter)
    except UnknownAdapter as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=exc.message) from exc
    messages = await build_messages(req, st)
    options = GenerateOptions(n=req.n, temperature=req.sampling.temperature,
                              top_p=req.sampling.top_p, max_tokens=req.sampling.max_tokens,
                              seed=req.sampling.seed, adapter=adapter)
    try:
        completions = await st.backend.chat(messages, options)
    except BackendError as exc:
        log.warning("planner backend failed", error=str(exc))
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, detail=f"planner model: {exc}") from exc
    plans = []
    for c in completions:
        parsed = parse_plan(c.text)
        plans.append(Plan(thought=parsed.thought, action_hint=parsed.action_hint, text=c.text,
                          finished=parsed.finished, answer=parsed.answer,
                          version=c.adapter or adapter or BASE,
                          prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens))
    latency = (time.perf_counter() - start) * 1000
    log.info("plan", n=req.n, version=adapter or BASE, latency_ms=round(latency, 1))
    return PlanResponse(plans=plans, latency_ms=latency)


@router.post("/adapters", response_model=AdapterInfo, status_code=status.HTTP_201_CREATED)
async def load_adapter(body: AdapterLoad, st: StateDep) -> AdapterInfo:
    """Load a peft adapter under a version name (optionally making it the default)."""
    try:
        info = await st.adapters.load(body)
    except AdapterConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, detail=str(exc)) from exc
    except FileNotFoundError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[
            {"loc": ["body", "uri"], "msg": f"no adapter at {body.uri}: {exc}",
             "type": "value_error"}]) from exc
    except (BackendError, ValueError, OSError) as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=[
            {"loc": ["body", "uri"], "msg": f"cannot load adapter: {exc}",
             "type": "value_error"}]) from exc
    log.info("adapter loaded", version=body.version, uri=body.uri, default=info.is_default)
    return info


@router.get("/adapters", response_model=AdapterList)
async def list_adapters(st: StateDep) -> AdapterList:
    """The loaded adapters ('base' included) and which one is the default."""
    return st.adapters.listing()


@router.delete("/adapters/{version}", status_code=status.HTTP_204_NO_CONTENT)
async def unload_adapter(version: str, st: StateDep) -> None:
    """Unload an adapter; when it was the default, the base model becomes the default."""
    try:
        await st.adapters.unload(version)
    except UnknownAdapter as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=exc.message) from exc
    log.info("adapter unloaded", version=version)


def _make_backend(settings: PlannerSettings) -> ChatBackend:
    from coda.inference.factory import make_backend  # heavy imports only when serving

    backend: ChatBackend = make_backend(settings.backend, **settings.backend_kwargs())
    return backend


def create_app(settings: PlannerSettings | None = None, *,
               backend: ChatBackend | None = None) -> FastAPI:
    """The planner app; ``backend`` overrides the one the settings describe."""
    cfg = settings or PlannerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = backend is None
        chat = backend if backend is not None else _make_backend(cfg)
        app.state.planner = PlannerState(cfg, chat, AdapterRegistry(chat, cfg.adapter_cache_dir))
        log.info("planner ready", backend=cfg.backend, model=cfg.model)
        try:
            yield
        finally:
            if owned:
                await chat.aclose()

    async def ready() -> dict[str, Any]:
        detail: dict[str, Any] = await app.state.planner.backend.ready()
        return detail

    app, _ = create_service_app(
        name="coda-planner", version=VERSION,
        description="CODA planner: next-step thoughts, n samples, versioned adapters",
        max_body_bytes=cfg.max_body_bytes, max_concurrency=cfg.max_concurrency,
        ready=ready, lifespan=lifespan)
    app.include_router(router)
    return app
