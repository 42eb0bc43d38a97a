"""The judge service: ``POST /v1/judge`` and ``POST /v1/instructions/check``."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, status

from coda.contracts.services_api import (
    InstructionCheck,
    InstructionCheckRequest,
    JudgeRequest,
    JudgeResponse,
)
from coda.inference.base import BackendError, ChatBackend, GenerateOptions
from coda.logging import get_logger
from coda.prompts.judge import build_instruction_messages
from coda.service import create_service_app
from judge_service import judging
from judge_service.images import ImageError, high_url, load_image
from judge_service.parsing import parse_instruction_check
from judge_service.settings import JudgeSettings

log = get_logger("judge_service")
VERSION = "0.1.0"


@dataclass
class JudgeState:
    settings: JudgeSettings
    backends: dict[str, ChatBackend]


def get_state(request: Request) -> JudgeState:
    state: JudgeState = request.app.state.judge
    return state


StateDep = Annotated[JudgeState, Depends(get_state)]
router = APIRouter(prefix="/v1", tags=["judge"])


def _unprocessable(loc: list[str | int], msg: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                         detail=[{"loc": ["body", *loc], "msg": msg, "type": "value_error"}])


def select_models(st: JudgeState, names: list[str] | None) -> dict[str, ChatBackend]:
    """The configured models named by ``policy.models`` (all when None)."""
    if names is None:
        return dict(st.backends)
    unknown = [n for n in names if n not in st.backends]
    if unknown or not names:
        raise _unprocessable(["policy", "models"],
                             f"unknown judge model(s) {unknown}; configured: {list(st.backends)}")
    return {n: st.backends[n] for n in dict.fromkeys(names)}


@router.post("/judge", response_model=JudgeResponse)
async def judge(req: JudgeRequest, st: StateDep) -> JudgeResponse:
    """Judge a trajectory: multi-resolution filter, voting@k, ensemble; every vote returned."""
    start = time.perf_counter()
    models = select_models(st, req.policy.models)
    try:
        verdict = await judging.judge(req, models, st.settings)
    except ImageError as exc:
        raise _unprocessable(list(exc.field), str(exc)) from exc
    except BackendError as exc:
        log.warning("judge backend failed", error=str(exc))
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, detail=f"judge model: {exc}") from exc
    latency = (time.perf_counter() - start) * 1000
    log.info("judged", steps=len(req.steps), correct=verdict.correct, votes=len(verdict.votes),
             latency_ms=round(latency, 1))
    return JudgeResponse(verdict=verdict, latency_ms=latency)


@router.post("/instructions/check", response_model=InstructionCheck)
async def check_instruction(req: InstructionCheckRequest, st: StateDep) -> InstructionCheck:
    """Is a generated instruction clear, executable from the initial state and judgeable?"""
    models = select_models(st, [req.model] if req.model else None)
    name, backend = next(iter(models.items()))
    url = None
    try:
        if req.screenshot is not None:
            image = await load_image(req.screenshot, ("screenshot",), st.settings.artifacts_url)
            url = high_url(image, st.settings.high_max_pixels)
    except ImageError as exc:
        raise _unprocessable(list(exc.field), str(exc)) from exc
    messages = build_instruction_messages(req.app, req.instruction, url)
    options = GenerateOptions(n=1, temperature=0.0, top_p=1.0, max_tokens=st.settings.max_tokens)
    try:
        [completion] = await backend.chat(messages, options)
    except BackendError as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, detail=f"judge model: {exc}") from exc
    clear, executable, judgeable, reason, parsed = parse_instruction_check(completion.text)
    log.info("instruction checked", model=name, parsed=parsed, clear=clear,
             executable=executable, judgeable=judgeable)
    return InstructionCheck(clear=clear, executable=executable, judgeable=judgeable,
                            reason=reason, parsed=parsed, raw=completion.text)


def _make_backends(settings: JudgeSettings) -> dict[str, ChatBackend]:
    from coda.inference.factory import make_backend  # heavy imports only when serving

    if not settings.models:
        raise ValueError("no judge model configured: set CODA_JUDGE_MODELS to a JSON list of "
                         '{"name": ..., "backend": "openai", "options": {"base_url": ..., '
                         '"model": ...}}')
    return {m.name: make_backend(m.backend, **m.options) for m in settings.models}


def create_app(settings: JudgeSettings | None = None, *,
               backends: Mapping[str, ChatBackend] | None = None) -> FastAPI:
    """The judge app; ``backends`` (name -> backend) overrides the configured models."""
    cfg = settings or JudgeSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = backends is None
        chats = dict(backends) if backends is not None else _make_backends(cfg)
        app.state.judge = JudgeState(cfg, chats)
        log.info("judge ready", models=list(chats))
        try:
            yield
        finally:
            if owned:
                for chat in chats.values():
                    await chat.aclose()

    async def ready() -> dict[str, Any]:
        st: JudgeState = app.state.judge
        return {name: await b.ready() for name, b in st.backends.items()}

    app, _ = create_service_app(
        name="coda-judge", version=VERSION,
        description="CODA judge: trajectory verdicts with voting, multi-resolution, ensemble",
        max_body_bytes=cfg.max_body_bytes, max_concurrency=cfg.max_concurrency,
        ready=ready, lifespan=lifespan)
    app.include_router(router)
    return app
