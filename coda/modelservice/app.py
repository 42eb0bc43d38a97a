"""Building a model service app: :func:`create_model_app` and what routes share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI, Request

import coda
from coda.contracts.services_api import Sampling
from coda.inference.base import PromptTooLong
from coda.modelservice.errors import Loc, install_error_handlers
from coda.modelservice.state import ModelState
from coda.service import FieldError, TokenAuth, create_service_app, error_responses, require

VERSION = coda.__version__
"""Every model service reports the package version."""

INFERENCE = [Depends(require("inference", "admin"))]
"""Plan / act / judge: an inference token (or the admin token)."""
ADMIN = [Depends(require("admin"))]
"""Adapter management: the admin token."""

MODEL_ROUTE_ERRORS = (413, 422, 502, 503)
"""What a model route answers besides the kit's generic codes (401/403/408/422/504 ...)."""
ROUTE_ERRORS = error_responses(*MODEL_ROUTE_ERRORS)


def get_state(request: Request) -> ModelState:
    state: ModelState = request.app.state.model
    return state


def check_max_tokens(sampling: Sampling, state: ModelState, loc: Loc = ("body", "sampling")
                     ) -> None:
    """``sampling.max_tokens`` within the service's ``max_tokens`` setting (else 422)."""
    limit = state.settings.max_tokens
    if sampling.max_tokens > limit:
        raise FieldError([*loc, "max_tokens"], f"at most {limit} on this service",
                         kind="less_than_equal")


def too_long(exc: PromptTooLong, texts: Iterable[tuple[Loc, str | None]]) -> FieldError:
    """A :class:`PromptTooLong` as a 413 naming the request's longest text field."""
    loc, _ = max(((loc, text) for loc, text in texts if text),
                 key=lambda item: len(item[1] or ""), default=(("body",), ""))
    return FieldError(list(loc), str(exc), status_code=413, kind="prompt_too_long")


def create_model_app(state: ModelState, *, name: str, description: str,
                     routers: Sequence[APIRouter]) -> FastAPI:
    """A model service app on the shared service kit (:mod:`coda.service`): bearer roles
    ``inference`` and ``admin`` checked before the body, body limits and timeouts, a deadline
    and cancel-on-disconnect per request; default tokens refused at build time outside dev
    mode; the state started/stopped by the lifespan; one error mapping; the routers."""
    settings = state.settings
    settings.check_secrets()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await state.start()
        try:
            yield
        finally:
            await state.stop()

    app, _ = create_service_app(
        name=name, version=VERSION, description=description,
        max_body_bytes=settings.max_body_bytes, body_timeout_s=settings.body_timeout_s,
        max_concurrency=settings.max_concurrency, queue_timeout_s=settings.queue_timeout_s,
        request_timeout_s=settings.request_timeout_s, auth=TokenAuth(settings.tokens()),
        ready=state.readiness, lifespan=lifespan)
    app.state.model = state
    install_error_handlers(app)
    for router in routers:
        app.include_router(router)
    return app

