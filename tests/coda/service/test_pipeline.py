"""The shared request pipeline over real HTTP: strict JSON, safe errors, the JSON 500, auth
before the body, slow bodies, deadlines, cancel on disconnect, documented error codes."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from coda.logging import configure_logging
from coda.service import (
    FieldError,
    TokenAuth,
    create_service_app,
    current_cancel_event,
    error_responses,
    require,
)
from tests.coda.service.conftest import serve
from tests.fixtures.waiting import wait_for

USER, ADMIN = "user-token-0123456789", "admin-token-0123456789"
AUTH = {"authorization": f"Bearer {USER}"}


class Echo(BaseModel):
    name: str = Field(max_length=50)
    value: float = 0.0
    items: list[dict[str, Any]] = Field(default_factory=list)


def _app() -> Any:
    auth = TokenAuth({"user": [USER], "admin": [ADMIN]}, public_reads=True)
    app, _ = create_service_app(name="kit-test", version="0", description="d", auth=auth,
                                max_body_bytes=1024 * 1024, body_timeout_s=1.0,
                                max_concurrency=1, queue_timeout_s=0.5, request_timeout_s=2.0)
    app.state.cancelled = threading.Event()
    app.state.blocking_started = threading.Event()
    user = Depends(require("user", "admin"))

    @app.post("/v1/echo", dependencies=[user])
    async def echo(body: Echo) -> Echo:
        return body

    @app.get("/v1/items", dependencies=[Depends(require("user", public=True))])
    async def items(app_name: str = Query("x", alias="app")) -> dict[str, str]:
        return {"app": app_name}

    @app.post("/v1/admin", dependencies=[Depends(require("admin"))])
    async def admin_only(body: Echo) -> dict[str, bool]:
        return {"ok": True}

    @app.post("/v1/boom", dependencies=[user])
    async def boom() -> None:
        raise RuntimeError("kaboom in the handler")

    @app.post("/v1/field", dependencies=[user], responses=error_responses(404))
    async def field() -> None:
        raise FieldError(("body", "screenshot", "ref"), "no such artifact \ud800")

    @app.post("/v1/sleep", dependencies=[user])
    async def sleep(body: dict[str, float]) -> dict[str, bool]:
        await asyncio.sleep(body.get("s", 0))
        return {"ok": True}

    @app.post("/v1/blocking", dependencies=[user])
    async def blocking() -> dict[str, bool]:
        def work() -> bool:
            event = current_cancel_event()
            app.state.blocking_started.set()
            stopped = event.wait(timeout=20)  # a generate loop would check it per token
            if stopped:
                app.state.cancelled.set()
            return stopped
        return {"stopped": await asyncio.to_thread(work)}

    routed = APIRouter(prefix="/v1/routed", dependencies=[Depends(require("admin"))])

    @routed.post("/{name}/thing")
    async def routed_thing(name: str, body: Echo) -> dict[str, str]:
        return {"name": name}

    app.include_router(routed)
    return app


@pytest.fixture(scope="module")
def kit() -> Iterator[tuple[str, Any]]:
    app = _app()
    for url in serve(app):
        yield url, app


def post(url: str, path: str, raw: bytes | str, headers: dict[str, str] | None = None,
         ) -> httpx.Response:
    return httpx.post(f"{url}{path}", content=raw, timeout=10,
                      headers={"content-type": "application/json", **AUTH, **(headers or {})})


@pytest.mark.parametrize("raw", [
    '{"name": "a", "value": NaN}', '{"name": "a", "value": Infinity}',
    '{"name": "a", "value": -Infinity}', '{"name": "a", "value": 1e400}',
    '{"name": "a", "unknown": [NaN]}', "[" * 5000 + "]" * 5000, '{"name": ',
])
def test_non_standard_json_is_a_422(kit, raw: str) -> None:
    r = post(kit[0], "/v1/echo", raw)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["type"] == "json_invalid"


@pytest.mark.parametrize(("raw", "loc"), [
    ('{"name": "a\\u0000b"}', ["body", "name"]),
    ('{"name": "a", "items": [{}, {"k": "\\ud800"}]}', ["body", "items", 1, "k"]),
    ('{"name": "a\\udc00"}', ["body", "name"]),
])
def test_unstorable_strings_are_a_422_naming_the_field(kit, raw: str, loc: list) -> None:
    r = post(kit[0], "/v1/echo", raw)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc


def test_validation_errors_echo_safely(kit) -> None:
    long_name = "x" * 10_000
    r = post(kit[0], "/v1/echo", json.dumps({"name": long_name}))
    assert r.status_code == 422
    assert len(r.content) < 2_000  # the input echo is cut
    r = post(kit[0], "/v1/field", b"")
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "screenshot", "ref"]  # escaped, not a 500


def test_nul_in_query_or_path_is_a_422(kit) -> None:
    r = httpx.get(f"{kit[0]}/v1/items?app=a%00b")
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["query", "app"]
    assert httpx.get(f"{kit[0]}/v1/items%00x").status_code == 422
    assert httpx.get(f"{kit[0]}/v1/items?app=ok").json() == {"app": "ok"}


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The process's log as JSON lines, into a buffer."""
    stream = io.StringIO()
    configure_logging("INFO", json_logs=True)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(stream)
    yield stream


def events(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_unhandled_error_is_a_json_500_with_request_id_metrics_and_traceback(
        kit, json_log: io.StringIO) -> None:
    url, _ = kit
    r = post(url, "/v1/boom", b"", headers={"x-request-id": "rid-boom-1"})
    assert r.status_code == 500
    assert r.headers["x-request-id"] == "rid-boom-1"
    assert r.json() == {"detail": "internal server error", "request_id": "rid-boom-1"}
    metrics = httpx.get(f"{url}/metrics").text
    assert 'http_requests_total{code="500",method="POST",route="/v1/boom"} 1.0' in metrics
    [entry] = [e for e in events(json_log) if e.get("event") == "request.unhandled_error"]
    assert entry["request_id"] == "rid-boom-1"
    assert "Traceback (most recent call last)" in entry["exception"]
    assert "kaboom in the handler" in entry["exception"]


@pytest.mark.parametrize(("headers", "code"), [({}, 401), ({"authorization": "Bearer nope"}, 401),
                                               ({"authorization": f"Bearer {USER}"}, 403)])
def test_auth_comes_before_the_body(kit, headers: dict[str, str], code: int) -> None:
    r = httpx.post(f"{kit[0]}/v1/admin", content=b"{not json", headers={
        "content-type": "application/json", **headers})
    assert r.status_code == code


@pytest.mark.parametrize(("headers", "code"), [
    ({}, 401), ({"authorization": f"Bearer {USER}"}, 403),
    ({"authorization": f"Bearer {ADMIN}"}, 422)])
def test_auth_comes_before_the_body_on_included_routers(kit, headers: dict[str, str],
                                                        code: int) -> None:
    """Routes added with include_router, the requirement on the router itself."""
    r = httpx.post(f"{kit[0]}/v1/routed/a/thing", content=b"{not json", headers={
        "content-type": "application/json", **headers})
    assert r.status_code == code
    r = httpx.post(f"{kit[0]}/v1/routed/a/thing", json={"name": "x"},
                   headers={"authorization": f"Bearer {ADMIN}"})
    assert r.json() == {"name": "a"}


@pytest.mark.parametrize("path", ["/v1/echo", "/v1/routed/a/thing"])
def test_a_huge_body_without_token_is_refused_unread(kit, path: str) -> None:
    """Headers declaring 35 MiB and no body at all: the 401 comes back at once."""
    host = urlsplit(kit[0])
    with socket.create_connection((host.hostname, host.port), timeout=5) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     "content-length: 36700160\r\n\r\n".encode())
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 401")


def test_public_reads_without_token_and_bad_tokens_refused(kit) -> None:
    assert httpx.get(f"{kit[0]}/v1/items").status_code == 200
    assert httpx.get(f"{kit[0]}/v1/items", headers={"authorization": "Bearer x"}).status_code == 401


def test_slow_bodies_time_out_and_hold_no_slot(kit) -> None:
    """Three connections send headers and one byte; the one slot stays free for others."""
    host = urlsplit(kit[0])
    socks = []
    for _ in range(3):
        sock = socket.create_connection((host.hostname, host.port), timeout=10)
        sock.sendall(b"POST /v1/echo HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                     b"authorization: Bearer " + USER.encode() + b"\r\ncontent-length: 100\r\n"
                     b"\r\n{")
        socks.append(sock)
    try:
        r = post(kit[0], "/v1/echo", '{"name": "ok"}')
        assert r.status_code == 200  # not 503: the slow uploads hold no slot
        for sock in socks:
            assert sock.recv(4096).startswith(b"HTTP/1.1 408")
    finally:
        for sock in socks:
            sock.close()


def test_deadline_is_a_504(kit) -> None:
    r = post(kit[0], "/v1/sleep", '{"s": 30}')
    assert r.status_code == 504
    assert post(kit[0], "/v1/sleep", '{"s": 0}').status_code == 200  # the slot came back


def test_client_disconnect_cancels_the_request_and_signals_threads(
        kit, json_log: io.StringIO) -> None:
    url, app = kit
    app.state.cancelled.clear()
    host = urlsplit(url)
    with socket.create_connection((host.hostname, host.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/blocking HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n"
                     b"authorization: Bearer " + USER.encode() + b"\r\n\r\n")
        assert app.state.blocking_started.wait(timeout=20), "the handler never started"
    # the client is gone while the handler's thread waits
    assert app.state.cancelled.wait(timeout=10), "the thread never saw the cancel event"
    # the thread sees the event first; the pipeline logs why once the handler has unwound
    def logged() -> list[str] | None:
        names = [e["event"] for e in events(json_log)]
        return names if "request.client_disconnected" in names else None

    names = wait_for(logged, "the disconnect logged", 10, interval=0.05)
    assert "request.deadline_passed" not in names
    assert post(url, "/v1/sleep", '{"s": 0}').status_code == 200


def test_openapi_documents_the_codes_routes_answer(kit) -> None:
    spec = httpx.get(f"{kit[0]}/openapi.json").json()
    echo = spec["paths"]["/v1/echo"]["post"]["responses"]
    assert {"200", "401", "403", "408", "413", "422", "500", "503", "504"} <= set(echo)
    assert echo["401"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"}
    assert "404" in spec["paths"]["/v1/field"]["post"]["responses"]
    assert "ErrorBody" in spec["components"]["schemas"]
    health = spec["paths"]["/healthz"]["get"]["responses"]
    assert "500" in health and "401" not in health


def test_requests_keep_working_after_the_abuse(kit) -> None:
    assert post(kit[0], "/v1/echo", '{"name": "fine", "value": 1.5}').json()["value"] == 1.5
