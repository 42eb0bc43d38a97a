"""The app factory every CODA HTTP service uses: health, readiness, metrics, the shared
request pipeline (:mod:`coda.service.middleware`), auth (:mod:`coda.service.auth`) and one
error format (:mod:`coda.service.errors`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from coda.logging import get_logger
from coda.service.auth import AuthGate, TokenAuth
from coda.service.errors import document_generic_errors, install_error_handlers
from coda.service.middleware import RequestContext, RequestLimits
from coda.service.routes import RouteTable

log = get_logger("coda.service")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def create_service_app(
    *,
    name: str,
    version: str,
    description: str,
    max_body_bytes: int = 64 * 1024 * 1024,
    body_timeout_s: float | None = 30.0,
    max_concurrency: int | None = None,
    queue_timeout_s: float = 30.0,
    request_timeout_s: float | None = None,
    auth: TokenAuth | None = None,
    ready: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    lifespan: Any = None,
    limit_prefix: str = "/v1/",
) -> tuple[FastAPI, CollectorRegistry]:
    """A FastAPI app with ``/healthz``, ``/readyz``, ``/metrics`` and the shared pipeline.

    ``max_concurrency`` / ``queue_timeout_s`` and ``request_timeout_s`` apply to paths under
    ``limit_prefix``; ``auth`` holds the tokens that routes using
    :func:`coda.service.auth.require` are checked against (before their body is read).
    """
    app = FastAPI(title=name, version=version, description=description, lifespan=lifespan)
    app.state.auth = auth
    registry = CollectorRegistry()
    requests = Counter("http_requests_total", "HTTP requests", ["route", "method", "code"],
                       registry=registry)
    latency = Histogram("http_request_seconds", "HTTP request latency", ["route", "method"],
                        registry=registry, buckets=LATENCY_BUCKETS)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok", "service": name}

    @app.get("/readyz", tags=["ops"], responses={503: {"description": "Not ready"}})
    async def readyz() -> Response:
        """Readiness: dependencies (model, database) are loaded and reachable."""
        detail: dict[str, Any] = {}
        ok = True
        if ready is not None:
            try:
                detail = await ready()
            except Exception as exc:  # noqa: BLE001 - any dependency's failure: a logged 503
                log.warning("service.not_ready", service=name,
                            error=f"{type(exc).__name__}: {exc}")
                ok, detail = False, {"error": str(exc)}
        return JSONResponse({"status": "ready" if ok else "not_ready", "detail": detail},
                            status_code=200 if ok else 503)

    @app.get("/metrics", tags=["ops"], include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    install_error_handlers(app)

    def generic_codes(path: str, _method: str, op: dict[str, Any]) -> Iterable[int]:
        codes = [422, 500, 503]
        if "requestBody" in op:
            codes += [400, 408, 413]
        if op.get("security"):
            codes += [401, 403]
        if path.startswith(limit_prefix):
            if max_concurrency is not None:
                codes.append(429 if queue_timeout_s == 0 else 503)
            if request_timeout_s is not None:
                codes.append(504)
        return codes

    document_generic_errors(app, generic_codes)
    # added innermost first: the request pipeline, then auth, then request ids outermost
    app.add_middleware(RequestLimits, max_body_bytes=max_body_bytes,
                       body_timeout_s=body_timeout_s, max_concurrency=max_concurrency,
                       queue_timeout_s=queue_timeout_s, request_timeout_s=request_timeout_s,
                       prefix=limit_prefix)
    routes = RouteTable(app.router)
    if auth is not None:
        app.add_middleware(AuthGate, auth=auth, routes=routes)
    app.add_middleware(RequestContext, requests=requests, latency=latency, routes=routes)
    return app, registry
