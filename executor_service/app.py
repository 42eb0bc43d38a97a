"""The executor service app: ``POST /v1/act`` and ``POST /v1/act/batch`` over UI-TARS-1.5."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from coda.contracts.services_api import ActBatchRequest, ActBatchResponse, ActRequest, ActResult
from coda.inference.base import BackendError, ChatBackend
from coda.logging import get_logger
from coda.service import create_service_app
from executor_service import __version__, logic
from executor_service.backend import build_backend
from executor_service.settings import ExecutorSettings

log = get_logger("executor_service")


class ExecutorState:
    """The settings and the backend, which loads in the background after startup."""

    def __init__(self, settings: ExecutorSettings, backend: ChatBackend | None = None) -> None:
        self.settings = settings
        self.backend = backend
        self.owns_backend = backend is None
        self.load_error: str | None = None
        self.loader: asyncio.Task[None] | None = None

    async def load(self) -> None:
        try:
            self.backend = await asyncio.to_thread(build_backend, self.settings)
            log.info("executor_backend_ready", backend=self.settings.backend,
                     model=self.settings.model)
        except Exception as exc:  # reported by /readyz and the routes, never a crash
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("executor_backend_failed", error=self.load_error)

    async def ready(self) -> dict[str, Any]:
        if self.backend is None:
            raise RuntimeError(self.load_error or "model loading")
        return {"backend": await self.backend.ready(), "history_n": self.settings.history_n}

    def require_backend(self) -> ChatBackend:
        if self.backend is None:
            detail = f"model not loaded: {self.load_error}" if self.load_error else "model loading"
            raise HTTPException(503, detail, headers={"Retry-After": "5"})
        return self.backend


def get_state(request: Request) -> ExecutorState:
    state: ExecutorState = request.app.state.executor
    return state


StateDep = Annotated[ExecutorState, Depends(get_state)]
router = APIRouter(prefix="/v1", tags=["executor"])


@router.post("/act")
async def act(req: ActRequest, state: StateDep) -> ActResult:
    """Ground one planner thought into one action on the given screenshot."""
    backend = state.require_backend()
    result = await logic.act(backend, state.settings, req)
    log.info("act", action=result.action.type if result.action else None,
             parse_error=result.error is not None, latency_ms=round(result.latency_ms, 1))
    return result


@router.post("/act/batch")
async def act_batch(req: ActBatchRequest, state: StateDep) -> ActBatchResponse:
    """Ground G thoughts on one state in one backend call (GRPO groups)."""
    backend = state.require_backend()
    resp = await logic.act_batch(backend, state.settings, req)
    log.info("act_batch", g=len(req.thoughts),
             parse_errors=sum(r.error is not None for r in resp.results),
             latency_ms=round(resp.latency_ms, 1))
    return resp


def create_app(settings: ExecutorSettings | None = None,
               backend: ChatBackend | None = None) -> FastAPI:
    """The executor app; without ``backend`` one is built from ``settings`` after startup."""
    settings = settings or ExecutorSettings()
    state = ExecutorState(settings, backend)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if state.backend is None:
            state.loader = asyncio.create_task(state.load())
        try:
            yield
        finally:
            if state.loader is not None:
                state.loader.cancel()
            if state.owns_backend and state.backend is not None:
                await state.backend.aclose()

    app, _ = create_service_app(
        name="coda-executor", version=__version__,
        description="Planner thought + screenshot -> one GUI action (UI-TARS-1.5).",
        max_body_bytes=settings.max_body_bytes, max_concurrency=settings.max_concurrency,
        queue_timeout_s=settings.queue_timeout_s, ready=state.ready, lifespan=lifespan,
    )
    app.state.executor = state
    app.include_router(router)

    @app.exception_handler(logic.InputError)
    async def input_error(_: Request, exc: logic.InputError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": [
            {"loc": list(exc.loc), "msg": exc.message, "type": "value_error"}]})

    @app.exception_handler(BackendError)
    async def backend_error(_: Request, exc: BackendError) -> JSONResponse:
        log.error("executor_backend_error", error=str(exc))
        return JSONResponse(status_code=502, content={"detail": f"model backend: {exc}"})

    return app
