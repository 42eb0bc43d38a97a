"""The request pipeline every CODA service shares, as pure ASGI middlewares.

Outermost first:

1. :class:`RequestContext` — request id (``x-request-id`` in and out, bound to the log
   context), request count and latency per route, and the last line of defence: an exception
   no handler caught becomes a JSON 500 that carries the request id, is counted, and is
   logged with its traceback.
2. :class:`coda.service.auth.AuthGate` — bearer tokens checked before the body is read.
3. :class:`RequestLimits` — NUL characters in the path or query refused; the body read
   completely (413 past ``max_body_bytes``, 408 when it does not arrive within
   ``body_timeout_s``) and, when it is JSON, checked to be strict JSON
   (:mod:`coda.service.jsonguard`) — all *before* a concurrency slot is taken, so slow or
   hostile uploads cannot hold the slots; then at most ``max_concurrency`` requests run
   (the rest wait ``queue_timeout_s``, then 503; 429 with no waiting room); each has a
   deadline (504) and is cancelled when its client disconnects, with the request's cancel
   event (:mod:`coda.service.cancellation`) set for code running in threads.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl

import structlog
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from coda.logging import get_logger
from coda.service.cancellation import bind_cancel_event, reset_cancel_event
from coda.service.errors import safe_json
from coda.service.jsonguard import JSONBodyError, strict_loads, text_problem
from coda.service.routes import RouteTable

log = get_logger("coda.service")
THREAD_PARSE_BYTES = 256 * 1024
"""JSON bodies larger than this are checked off the event loop."""


class RequestContext:
    """Request ids, request metrics and the JSON 500 for unhandled exceptions."""

    def __init__(self, app: ASGIApp, requests: Counter, latency: Histogram,
                 routes: RouteTable | None = None) -> None:
        self.app = app
        self.requests = requests
        self.latency = latency
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                rid = value.decode("latin-1")[:64]
                break
        if not rid or not rid.isprintable():
            rid = uuid.uuid4().hex[:16]
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
        except Exception:
            log.exception("request.unhandled_error", method=scope.get("method"),
                          path=scope.get("path"))
            if not started:
                await safe_json({"detail": "internal server error", "request_id": rid},
                                500)(scope, receive, send_with_id)
        finally:
            structlog.contextvars.reset_contextvars(**tokens)
            if started:
                path = getattr(scope.get("route"), "path", None)
                if path is None and self.routes is not None:  # answered before routing
                    info = self.routes.find(scope)
                    path = info.path_format if info is not None else None
                path = path or "unmatched"
                self.requests.labels(path, scope["method"], str(status)).inc()
                self.latency.labels(path, scope["method"]).observe(time.perf_counter() - start)


class _TooLarge(Exception):
    pass


class _ClientGone(Exception):
    pass


def _params_problem(scope: Scope) -> dict[str, Any] | None:
    """A 422 error item for a NUL (or other unstorable text) in the path or the query."""
    problem = text_problem(scope.get("path", ""))
    if problem:
        return {"loc": ["path"], "msg": f"path {problem}", "type": "string_invalid"}
    query = scope.get("query_string", b"")
    if b"%00" in query or b"\x00" in query:
        for key, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
            problem = text_problem(key) or text_problem(value)
            if problem:
                return {"loc": ["query", key.replace("\x00", "\\u0000")],
                        "msg": f"query parameter {problem}", "type": "string_invalid"}
    return None


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            mime = value.split(b";", 1)[0].strip().lower()
            return mime == b"application/json" or mime.endswith(b"+json")
    return False


class RequestLimits:
    """Body read and checked first, then a slot, a deadline and cancel-on-disconnect."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, body_timeout_s: float | None = 30.0,
                 max_concurrency: int | None = None, queue_timeout_s: float = 30.0,
                 request_timeout_s: float | None = None, prefix: str = "/v1/") -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self.queue_timeout_s = queue_timeout_s
        self.request_timeout_s = request_timeout_s
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = _params_problem(scope)
        if problem is not None:
            await safe_json({"detail": [problem]}, 422)(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await self._read_body(scope, receive)
        except _TooLarge:
            await safe_json({"detail": f"request body exceeds {self.max_body_bytes} bytes"},
                            413)(scope, receive, send)
            return
        except TimeoutError:
            await safe_json({"detail": f"request body not received within "
                                       f"{self.body_timeout_s} s"}, 408,
                            {"Connection": "close"})(scope, receive, send)
            return
        except _ClientGone:
            return
        if body and _is_json(scope):
            try:
                if len(body) > THREAD_PARSE_BYTES:
                    await asyncio.to_thread(strict_loads, body)
                else:
                    strict_loads(body)
            except JSONBodyError as exc:
                await safe_json({"detail": [exc.to_error()]}, 422)(scope, receive, send)
                return
        limited = self.sem is not None and scope["path"].startswith(self.prefix)
        if limited and not await self._acquire(scope, receive, send):
            return
        try:
            await self._run(scope, receive, send, body)
        finally:
            if limited:
                assert self.sem is not None
                self.sem.release()

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                raise _TooLarge
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _ClientGone
            body += message.get("body", b"")
            if len(body) > self.max_body_bytes:
                raise _TooLarge
            if not message.get("more_body", False):
                return bytes(body)

    async def _acquire(self, scope: Scope, receive: Receive, send: Send) -> bool:
        assert self.sem is not None
        try:
            if self.queue_timeout_s == 0 and self.sem.locked():
                raise TimeoutError
            await asyncio.wait_for(self.sem.acquire(), timeout=self.queue_timeout_s or None)
        except TimeoutError:
            code = 429 if self.queue_timeout_s == 0 else 503
            await safe_json({"detail": "overloaded, retry later"}, code,
                            {"Retry-After": "1"})(scope, receive, send)
            return False
        return True

    async def _run(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        """The app on the buffered body, in this task, with a deadline and cancel-on-
        disconnect: both cancel this task and set the request's cancel event."""
        me = asyncio.current_task()
        assert me is not None
        cancel = threading.Event()
        disconnected = asyncio.Event()
        state: dict[str, Any] = {"started": False, "complete": False, "replayed": False,
                                 "reason": None}

        async def replay() -> Message:
            if not state["replayed"]:
                state["replayed"] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["complete"] = True
            await send(message)

        def stop(reason: str) -> None:
            if state["reason"] is None and not state["complete"]:
                state["reason"] = reason
                cancel.set()
                me.cancel()

        async def watch() -> None:
            message = await receive()
            while message["type"] != "http.disconnect":
                message = await receive()
            disconnected.set()
            stop("disconnect")

        watcher = asyncio.create_task(watch())
        timer = (asyncio.get_running_loop().call_later(self.request_timeout_s, stop, "deadline")
                 if self.request_timeout_s else None)
        token = bind_cancel_event(cancel)
        try:
            await self.app(scope, replay, tracked_send)
        except asyncio.CancelledError:
            if state["reason"] is None:
                raise  # cancelled from outside (server shutdown)
            me.uncancel()
            if state["reason"] == "disconnect":
                log.info("request.client_disconnected", path=scope.get("path"))
            else:
                log.warning("request.deadline_passed", path=scope.get("path"),
                            deadline_s=self.request_timeout_s)
                if not state["started"]:
                    await safe_json({"detail": f"request exceeded the server deadline of "
                                               f"{self.request_timeout_s} s"}, 504)(
                        scope, receive, send)
        finally:
            reset_cancel_event(token)
            if timer is not None:
                timer.cancel()
            state["complete"] = True  # nothing may cancel this task any more
            watcher.cancel()
