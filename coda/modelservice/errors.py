"""Domain errors -> HTTP answers, in ONE place for the three model services.

Routes raise what went wrong (an unusable screenshot, an unknown adapter, a model server that
failed); :func:`install_error_handlers` turns each class into its status, in the shared
kit's error shape (:mod:`coda.service.errors`): field errors as
``{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`` (:class:`FieldError`, the kit's),
the others ``{"detail": "..."}``, always encodable. Messages are the errors' own, which never
carry server paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import Response

from coda.imagerefs import ArtifactStoreUnavailable, ImageRefError
from coda.inference.base import (
    AdapterInvalid,
    AdapterNotFound,
    BackendError,
    BackendRejected,
    PromptTooLong,
)
from coda.logging import get_logger
from coda.service.errors import FieldError, safe_json

log = get_logger("coda.modelservice")

Loc = Sequence[str | int]


class NotFound(LookupError):
    """The named thing (an adapter, a judge model) does not exist here: 404."""


class Conflict(ValueError):
    """The request contradicts the service's state: 409."""


class Unavailable(RuntimeError):
    """The service cannot answer yet (model loading) or any more (load failed): 503."""


def field_body(loc: Loc, message: str, kind: str = "value_error") -> dict[str, Any]:
    return {"detail": [FieldError(loc, message, kind=kind).to_error()]}


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None,
          ) -> Response:
    return safe_json(body, status, headers)


def answer(exc: Exception) -> Response | None:
    """The HTTP answer for a domain error, or None for an exception that is not one."""
    if isinstance(exc, ImageRefError):
        kind = "image_too_large" if exc.status == 413 else "value_error"
        return _json(exc.status, field_body(["body", *exc.field], str(exc), kind))
    if isinstance(exc, PromptTooLong):
        return _json(413, field_body(["body"], str(exc), "prompt_too_long"))
    if isinstance(exc, AdapterNotFound | AdapterInvalid):
        return _json(422, field_body(["body", "uri"], str(exc)))
    if isinstance(exc, NotFound):
        return _json(404, {"detail": str(exc)})
    if isinstance(exc, Conflict):
        return _json(409, {"detail": str(exc)})
    if isinstance(exc, Unavailable):
        return _json(503, {"detail": str(exc)}, {"Retry-After": "5"})
    if isinstance(exc, BackendRejected):
        return _json(422, field_body(["body"], f"the model server refused the request: {exc}"))
    if isinstance(exc, BackendError):
        log.warning("model.backend_failed", error=str(exc))
        return _json(502, {"detail": f"model backend: {exc}"})
    if isinstance(exc, ArtifactStoreUnavailable):
        return _json(502, {"detail": str(exc)})
    return None


MAPPED: tuple[type[Exception], ...] = (
    ImageRefError, PromptTooLong, AdapterNotFound, AdapterInvalid, NotFound,
    Conflict, Unavailable, BackendError, ArtifactStoreUnavailable)


def install_error_handlers(app: FastAPI) -> None:
    """Register :func:`answer` for every domain error class (the kit renders FieldError)."""

    async def handle(_: Request, exc: Exception) -> Response:
        response = answer(exc)
        assert response is not None  # registered for MAPPED classes only
        return response

    for cls in MAPPED:
        app.add_exception_handler(cls, handle)
