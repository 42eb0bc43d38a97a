"""The planner service: ``POST /v1/plan`` and the adapter routes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, status

from coda.contracts.services_api import (
    VERSION_PATTERN,
    AdapterInfo,
    AdapterList,
    AdapterLoad,
    ImageRef,
    Plan,
    PlanRequest,
    PlanResponse,
)
from coda.imagerefs import FieldPath
from coda.inference.base import (
    BackendRejected,
    ChatBackend,
    Completion,
    GenerateOptions,
    PromptTooLong,
)
from coda.inference.images import encode_data_url
from coda.logging import get_logger
from coda.modelservice.app import (
    ADMIN,
    INFERENCE,
    MODEL_ROUTE_ERRORS,
    check_max_tokens,
    create_model_app,
    get_state,
    too_long,
)
from coda.modelservice.errors import NotFound, Unavailable
from coda.modelservice.state import ModelState
from coda.prompts.planner import PastStep, build_planner_messages
from coda.service import current_cancel_event, error_responses
from planner_service.adapters import BASE, AdapterRegistry
from planner_service.parsing import parse_plan
from planner_service.settings import PlannerSettings
from planner_service.versions import VersionSync, restore_lost, stop_quietly

log = get_logger("planner_service")


class PlannerState(ModelState):
    """The kit's state plus the adapter registry (made once the model has loaded)."""

    settings: PlannerSettings

    def __init__(self, settings: PlannerSettings,
                 backends: Mapping[str, ChatBackend] | None = None) -> None:
        super().__init__(settings, {"planner": settings.spec()}, backends)
        self._adapters: AdapterRegistry | None = None

        self.sync: VersionSync | None = None

    async def on_loaded(self) -> None:
        s = self.settings
        registry = AdapterRegistry(self.backend(), self.reader.store, s.adapter_cache_dir,
                                   s.adapter_roots, s.max_adapter_bytes)
        if s.master_url:
            self.sync = VersionSync(registry, self.backend(), s.master_url,
                                    token=s.master_bearer(), interval_s=s.version_poll_s,
                                    keep=s.keep_versions)
            try:  # plans wait for the current version (or for a failed first pull)
                await self.sync.sync()
            except Exception as exc:  # noqa: BLE001 - as the poll loop: logged, the poll retries
                log.warning("planner.version_sync_failed", error=f"{type(exc).__name__}: {exc}")
            self.sync.start()
        self._adapters = registry

    async def readiness(self) -> dict[str, Any]:
        """Ready once the adapter registry is there (after the first pull from the master)."""
        detail = await super().readiness()
        if self._adapters is None:
            raise RuntimeError("pulling the planner versions from the master")
        if self.sync is not None:
            detail["current_version"] = self.sync.current
        return detail

    async def stop(self) -> None:
        await stop_quietly(self.sync)
        await super().stop()

    @property
    def adapters(self) -> AdapterRegistry:
        self.require_loaded()
        if self._adapters is None:
            raise Unavailable("model loading, retry later")
        return self._adapters


def planner_state(state: Annotated[ModelState, Depends(get_state)]) -> PlannerState:
    assert isinstance(state, PlannerState)
    return state


StateDep = Annotated[PlannerState, Depends(planner_state)]
router = APIRouter(prefix="/v1", tags=["planner"])


async def _data_url(image: ImageRef, field: FieldPath, st: PlannerState) -> str:
    return encode_data_url((await st.reader.aread(image, field)).data)


async def build_messages(req: PlanRequest, st: PlannerState) -> list[dict[str, Any]]:
    """Resolve the screenshots the prompt shows (only those) and lay out the conversation."""
    s = st.settings
    keep = min(s.keep_images, len(req.history), s.max_turns)
    first_kept = len(req.history) - keep

    async def past(i: int) -> PastStep:
        shot = req.history[i].screenshot
        url = None
        if shot is not None and i >= first_kept:
            url = await _data_url(shot, ("history", i, "screenshot"), st)
        return PastStep(req.history[i].thought, url)

    history = await asyncio.gather(*(past(i) for i in range(len(req.history))))
    current = await _data_url(req.screenshot, ("screenshot",), st)
    previous = None
    if req.previous_screenshot is not None and keep > 0:
        previous = await _data_url(req.previous_screenshot, ("previous_screenshot",), st)
    return build_planner_messages(
        req.instruction, history, current, previous, answer_mode=req.answer_mode,
        max_turns=s.max_turns, keep_images=s.keep_images)


def _texts(req: PlanRequest) -> list[tuple[tuple[str | int, ...], str | None]]:
    return [(("body", "instruction"), req.instruction),
            *((("body", "history", i, "thought"), h.thought) for i, h in enumerate(req.history))]


async def _resolve(st: PlannerState, requested: str | None) -> str | None:
    """The adapter to use; a version this service has not loaded yet is first looked up at
    the master (a group job may name a version published since the last poll)."""
    try:
        return st.adapters.resolve(requested)
    except NotFound:
        if st.sync is None:
            raise
    try:
        await st.sync.sync()
    except Exception as exc:  # noqa: BLE001 - master or model server away: a logged 503, not a 404
        log.warning("planner.version_sync_failed", error=f"{type(exc).__name__}: {exc}")
        raise Unavailable(f"adapter '{requested}' is not loaded and the master's versions "
                          f"could not be pulled now ({type(exc).__name__}), retry later"
                          ) from None
    return st.adapters.resolve(requested)


async def _chat(st: PlannerState, messages: list[dict[str, Any]],
                options: GenerateOptions) -> list[Completion]:
    """The backend's completions; an adapter the server no longer knows (a restarted vLLM
    answers 404) is loaded again and the request sent once more, else 503 (retry later)."""
    backend = st.backend()
    try:
        return await backend.chat(messages, options)
    except BackendRejected as exc:
        if exc.status != 404 or options.adapter is None:
            raise
        log.warning("planner.adapter_lost", version=options.adapter, error=str(exc)[:300])
        if options.adapter not in await restore_lost(st.adapters, backend):
            raise Unavailable(f"adapter '{options.adapter}' is being loaded again by the "
                              "model server, retry later") from None
    return await backend.chat(messages, options)


@router.post("/plan", response_model=PlanResponse, dependencies=INFERENCE,
             responses=error_responses(*MODEL_ROUTE_ERRORS, 404))
async def plan(req: PlanRequest, st: StateDep) -> PlanResponse:
    """Sample ``n`` next-step plans, each tagged with the adapter version that wrote it."""
    start = time.perf_counter()
    check_max_tokens(req.sampling, st)
    adapter = await _resolve(st, req.adapter)
    messages = await build_messages(req, st)
    options = GenerateOptions(n=req.n, temperature=req.sampling.temperature,
                              top_p=req.sampling.top_p, max_tokens=req.sampling.max_tokens,
                              seed=req.sampling.seed, adapter=adapter,
                              logprobs=req.return_logprobs, cancel=current_cancel_event())
    try:
        completions = await _chat(st, messages, options)
    except PromptTooLong as exc:
        raise too_long(exc, _texts(req)) from None
    plans = []
    for c in completions:
        parsed = parse_plan(c.text)
        plans.append(Plan(thought=parsed.thought, action_hint=parsed.action_hint, text=c.text,
                          finished=parsed.finished, answer=parsed.answer,
                          version=c.adapter or adapter or BASE,
                          prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                          token_ids=list(c.token_ids) if c.token_ids is not None else None,
                          logprobs=list(c.logprobs) if c.logprobs is not None else None))
    latency = (time.perf_counter() - start) * 1000
    log.info("planner.plan", n=req.n, version=adapter or BASE, latency_ms=round(latency, 1))
    return PlanResponse(plans=plans, latency_ms=latency)


@router.post("/adapters", response_model=AdapterInfo, status_code=status.HTTP_201_CREATED,
             dependencies=ADMIN, responses=error_responses(409, 413, 422, 502, 503))
async def load_adapter(body: AdapterLoad, st: StateDep) -> AdapterInfo:
    """Load a peft adapter under a version name (optionally making it the default)."""
    info = await st.adapters.load(body)
    log.info("planner.adapter_loaded", version=body.version, default=info.is_default)
    return info


@router.get("/adapters", response_model=AdapterList, dependencies=INFERENCE,
            responses=error_responses(503))
async def list_adapters(st: StateDep) -> AdapterList:
    """The loaded adapters ('base' included) and which one is the default."""
    return st.adapters.listing()


Version = Annotated[str, Path(min_length=1, max_length=200, pattern=VERSION_PATTERN)]


@router.delete("/adapters/{version}", status_code=status.HTTP_204_NO_CONTENT,
               dependencies=ADMIN, responses=error_responses(404, 422, 502, 503))
async def unload_adapter(version: Version, st: StateDep) -> None:
    """Unload an adapter; when it was the default, the base model becomes the default."""
    await st.adapters.unload(version)
    log.info("planner.adapter_unloaded", version=version)


def create_app(settings: PlannerSettings | None = None, *,
               backend: ChatBackend | None = None) -> FastAPI:
    """The planner app; ``backend`` overrides the one the settings describe."""
    cfg = settings or PlannerSettings()
    state = PlannerState(cfg, {"planner": backend} if backend is not None else None)
    return create_model_app(
        state, name="coda-planner",
        description="CODA planner: next-step thoughts, n samples, versioned adapters",
        routers=[router])
