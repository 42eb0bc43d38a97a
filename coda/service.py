"""What every CODA HTTP service shares: request ids, size and concurrency limits, health,
readiness and Prometheus metrics. A service builds its app with :func:`create_service_app`."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coda.logging import get_logger

log = get_logger("coda.service")


class BodySizeLimit:
    """Refuse request bodies over ``max_bytes`` with 413: by the content-length header, or,
    for a body without one (chunked), by counting it before the app sees any of it."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope.get("headers", []) if k == b"content-length"), None)
        if length is not None:
            if length.isdigit() and int(length) > self.max_bytes:
                await _too_large(self.max_bytes)(scope, receive, send)
                return
            await self.app(scope, receive, send)  # the server enforces the declared length
            return
        body, more = bytearray(), True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                await self.app(scope, _replay([msg]), send)
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.max_bytes:
                await _too_large(self.max_bytes)(scope, receive, send)
                return
        await self.app(scope, _replay([{"type": "http.request", "body": bytes(body)}], receive),
                       send)


def _replay(messages: list[Message], then: Receive | None = None) -> Receive:
    pending = list(messages)

    async def receive() -> Message:
        if pending:
            return pending.pop(0)
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


def _too_large(limit: int) -> JSONResponse:
    return JSONResponse({"detail": f"request body exceeds {limit} bytes"}, status_code=413)


class ConcurrencyLimit:
    """At most ``limit`` requests in flight on ``paths``; the rest wait up to ``queue_timeout_s``
    and then get 503 (429 when ``limit`` is 0 waiting room)."""

    def __init__(self, app: ASGIApp, limit: int, queue_timeout_s: float,
                 prefix: str = "/v1/") -> None:
        self.app = app
        self.sem = asyncio.Semaphore(limit)
        self.timeout = queue_timeout_s
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        try:
            if self.timeout == 0 and self.sem.locked():
                raise TimeoutError
            await asyncio.wait_for(self.sem.acquire(), timeout=self.timeout or None)
        except TimeoutError:
            code = 429 if self.timeout == 0 else 503
            resp = JSONResponse({"detail": "overloaded, retry later"}, status_code=code,
                                headers={"Retry-After": "1"})
            await resp(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.sem.release()


class RequestContext:
    """Request ids (``x-request-id`` in and out, bound to the log context) and the request
    count and latency metrics per route template, as a pure ASGI middleware."""

    def __init__(self, app: ASGIApp, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.requests = requests
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                rid = value.decode("latin-1")
                break
        rid = rid or uuid.uuid4().hex[:16]
        rid_header = (b"x-request-id", rid.encode("latin-1"))
        status = 500
        started = False
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status, started = message["status"], True
                message = {**message, "headers": [*message.get("headers", []), rid_header]}
            await send(message)

        tokens = structlog.contextvars.bind_contextvars(request_id=rid)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)
            if started:
                path = getattr(scope.get("route"), "path", "unmatched")
                self.requests.labels(path, scope["method"], str(status)).inc()
                self.latency.labels(path, scope["method"]).observe(time.perf_counter() - start)


def create_service_app(
    *,
    name: str,
    version: str,
    description: str,
    max_body_bytes: int = 64 * 1024 * 1024,
    max_concurrency: int | None = None,
    queue_timeout_s: float = 30.0,
    ready: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    lifespan: Any = None,
) -> tuple[FastAPI, CollectorRegistry]:
    """A FastAPI app with ``/healthz``, ``/readyz``, ``/metrics``, request ids and limits."""
    app = FastAPI(title=name, version=version, description=description, lifespan=lifespan)
    registry = CollectorRegistry()
    requests = Counter("http_requests_total", "HTTP requests", ["route", "method", "code"],
                       registry=registry)
    latency = Histogram("http_request_seconds", "HTTP request latency", ["route", "method"],
                        registry=registry,
                        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok", "service": name}

    @app.get("/readyz", tags=["ops"])
    async def readyz() -> Response:
        """Readiness: dependencies (model, database) are loaded and reachable."""
        detail: dict[str, Any] = {}
        ok = True
        if ready is not None:
            try:
                detail = await ready()
            except Exception as exc:  # readiness reports, it does not crash
                ok, detail = False, {"error": str(exc)}
        return JSONResponse({"status": "ready" if ok else "not_ready", "detail": detail},
                            status_code=200 if ok else 503)

    @app.get("/metrics", tags=["ops"], include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RequestContext, requests=requests, latency=latency)
    if max_concurrency is not None:
        app.add_middleware(ConcurrencyLimit, limit=max_concurrency, queue_timeout_s=queue_timeout_s)
    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    return app, registry
