"""One error shape for every CODA service: FastAPI's ``{"detail": ...}``, always encodable.

- :class:`FieldError` is what service code raises for a request field it cannot use: 422
  (or another 4xx) with ``loc`` naming the field, in FastAPI's validation-error format.
- :func:`install_error_handlers` renders validation errors, HTTP errors and field errors
  with ASCII-escaped JSON and without long input echoes, so no body can make the error
  itself fail to encode.
- :func:`error_responses` documents the codes a route answers in OpenAPI;
  :func:`document_generic_errors` adds the codes every route can get from the kit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

ECHO_LIMIT = 200
"""Longest input echoed back in a validation error (longer inputs are cut)."""

DESCRIPTIONS = {
    400: "Bad request (body could not be read)",
    401: "Missing or invalid bearer token",
    403: "Token lacks the role this route needs",
    404: "Not found",
    408: "Request body not received in time",
    409: "Conflict with the current state (stale lease, duplicate, in use)",
    413: "Request body or upload too large",
    415: "Unsupported media type",
    422: "Validation error: the fields that could not be used are named in `detail`",
    429: "Overloaded and no waiting room: retry later",
    500: "Internal error (carries x-request-id; reported in the logs)",
    502: "An upstream model backend failed",
    503: "Overloaded or a dependency is unavailable: retry later",
    504: "The request ran past the server's deadline",
}


class ErrorItem(BaseModel):
    loc: list[str | int] = Field(default_factory=list)
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error answer: a message, or a list of field errors (FastAPI's format)."""

    detail: str | list[ErrorItem] | list[dict[str, Any]]


class FieldError(Exception):
    """A request field that cannot be used. ``loc`` starts with where the field is
    (``"body"``, ``"query"``, ``"path"``), e.g. ``("body", "history", 2, "screenshot", "ref")``."""

    def __init__(self, loc: Sequence[str | int], message: str, *, status_code: int = 422,
                 kind: str = "value_error") -> None:
        super().__init__(message)
        self.loc = tuple(loc)
        self.message = message
        self.status_code = status_code
        self.kind = kind

    def to_error(self) -> dict[str, Any]:
        return {"loc": list(self.loc), "msg": self.message, "type": self.kind}


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats as strings (standard JSON has no NaN/Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def safe_json(content: Any, status_code: int,
              headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response that always encodes: non-ASCII escaped (lone surrogates included),
    non-finite floats as strings, unknown objects as their ``str``."""
    body = json.dumps(_finite(jsonable_encoder(content, custom_encoder={
        BaseException: str})), ensure_ascii=True, allow_nan=False, default=str)
    return Response(body, status_code=status_code, headers=headers,
                    media_type="application/json")


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ECHO_LIMIT:
        return value[:ECHO_LIMIT] + f"... ({len(value)} characters)"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=True, default=str)
        if len(text) > ECHO_LIMIT:
            return text[:ECHO_LIMIT] + f"... ({len(text)} characters)"
    return value


def validation_errors(errors: Iterable[Any]) -> list[dict[str, Any]]:
    """FastAPI/pydantic errors made safe to echo: inputs cut, context stringified."""
    out = []
    for err in errors:
        item = {k: v for k, v in dict(err).items() if k not in ("url", "ctx")}
        if "input" in item:
            item["input"] = _cut(item["input"])
        ctx = dict(err).get("ctx")
        if ctx:
            item["ctx"] = {k: str(v)[:ECHO_LIMIT] for k, v in ctx.items()}
        out.append(item)
    return list(_finite(jsonable_encoder(out, custom_encoder={BaseException: str})))


def install_error_handlers(app: FastAPI) -> None:
    """Validation errors, HTTP errors and :class:`FieldError` rendered with :func:`safe_json`."""

    async def on_validation(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return safe_json({"detail": validation_errors(exc.errors())}, 422)

    async def on_http(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code in (204, 304):
            return Response(status_code=exc.status_code, headers=exc.headers)
        return safe_json({"detail": exc.detail}, exc.status_code, exc.headers)

    async def on_field(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, FieldError)
        return safe_json({"detail": [exc.to_error()]}, exc.status_code)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(FieldError, on_field)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for a route that answers ``codes`` (besides its success)."""
    return {code: {"model": ErrorBody, "description": DESCRIPTIONS.get(code, "Error")}
            for code in codes}


def document_generic_errors(app: FastAPI, codes_for: Callable[[str, str, dict[str, Any]],
                                                             Iterable[int]]) -> None:
    """Make ``app.openapi()`` list, for every operation, the codes ``codes_for(path, method,
    operation)`` says the kit can answer there (the route's own declarations win)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version,
                             openapi_version=app.openapi_version, description=app.description,
                             routes=app.routes, servers=app.servers)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        if "ErrorBody" not in components:
            components["ErrorBody"] = ErrorBody.model_json_schema(
                ref_template="#/components/schemas/{model}")
            for name, sub in components["ErrorBody"].pop("$defs", {}).items():
                components.setdefault(name, sub)
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        for path, item in schema.get("paths", {}).items():
            for method, op in item.items():
                if not isinstance(op, dict) or "responses" not in op:
                    continue
                for code in codes_for(path, method, op):
                    op["responses"].setdefault(str(code), {
                        "description": DESCRIPTIONS.get(code, "Error"),
                        "content": {"application/json": {"schema": ref}}})
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
