"""Building a model service app: :func:`create_model_app` and what routes share."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

import coda
from coda.contracts.services_api import Sampling
from coda.inference.base import PromptTooLong
from coda.modelservice.errors import FieldError, Loc, install_error_handlers
from coda.modelservice.state import ModelState
from coda.service import create_service_app

VERSION = coda.__version__
"""Every model service reports the package version."""

S = TypeVar("S", bound=ModelState)

_bearer = HTTPBearer(auto_error=False)


def _caller_roles(request: Request, creds: HTTPAuthorizationCredentials | None) -> set[str]:
    if creds is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "bearer token required",
                            headers={"WWW-Authenticate": "Bearer"})
    given = creds.credentials.encode("utf-8", "surrogateescape")
    state: ModelState = request.app.state.model
    roles = {role for role, tokens in state.settings.tokens().items()
             if any(hmac.compare_digest(given, t.encode()) for t in tokens)}
    if not roles:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid token",
                            headers={"WWW-Authenticate": "Bearer"})
    return roles


async def require_inference(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """An inference (or admin) token."""
    _caller_roles(request, creds)


async def require_admin(
        request: Request,
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """The admin token (adapter management)."""
    if "admin" not in _caller_roles(request, creds):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin token required")


INFERENCE = [Depends(require_inference)]
ADMIN = [Depends(require_admin)]


class ErrorBody(BaseModel):
    detail: Any


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error statuses a route answers."""
    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS.get(code, "error")}
            for code in codes}


_DESCRIPTIONS = {
    401: "no or an unknown bearer token", 403: "the token's role may not do this",
    404: "not found", 409: "conflicts with the service's state",
    413: "an image or the prompt is too large", 422: "a field cannot be used (named in loc)",
    502: "the model server or the artifact store failed",
    503: "the model is loading (Retry-After) or overloaded",
}
MODEL_ROUTE_ERRORS = (401, 413, 422, 502, 503)


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
    return FieldError(list(loc), str(exc), status=413, kind="prompt_too_long")


def create_model_app(state: ModelState, *, name: str, description: str,
                     routers: Sequence[APIRouter]) -> FastAPI:
    """A model service app on the shared service base: tokens checked at build time, the
    state started/stopped by the lifespan, one error mapping, the routers."""
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
        max_body_bytes=settings.max_body_bytes, max_concurrency=settings.max_concurrency,
        queue_timeout_s=settings.queue_timeout_s, ready=state.readiness, lifespan=lifespan)
    app.state.model = state
    install_error_handlers(app)
    for router in routers:
        app.include_router(router)
    return app
