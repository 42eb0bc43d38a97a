"""What every service shares (coda.service): limits, readiness, metrics, request ids — over
real HTTP against a uvicorn server in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coda.service import create_service_app
from tests.coda.service.conftest import serve


def _app(**kw: Any) -> Any:
    state = {"ready": True}

    async def ready() -> dict[str, str]:
        if not state["ready"]:
            raise RuntimeError("model not loaded")
        return {"model": "tiny"}

    app, _ = create_service_app(name="test", version="0", description="d", ready=ready, **kw)

    entered, release = threading.Event(), threading.Event()

    @app.post("/v1/slow")
    async def slow(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("hold"):  # holds its slot until the test releases it
            entered.set()
            await asyncio.to_thread(release.wait, 30)
        else:
            await asyncio.sleep(float(body.get("s", 0.5)))
        return {"ok": True}

    app.state.flags = state
    app.state.entered, app.state.release = entered, release
    return app


@pytest.fixture
def limited() -> Iterator[tuple[str, Any]]:
    app = _app(max_concurrency=1, queue_timeout_s=0.2, max_body_bytes=2048)
    for url in serve(app):
        yield url, app


@pytest.fixture
def no_waiting_room() -> Iterator[tuple[str, Any]]:
    app = _app(max_concurrency=1, queue_timeout_s=0)
    for url in serve(app):
        yield url, app


async def _two_at_once(url: str, app: Any) -> list[int]:
    """A second request while the first holds the only slot (an event says it does, no
    guessed delay); the first is released after the second was answered."""
    async with httpx.AsyncClient(base_url=url) as c:
        first = asyncio.create_task(c.post("/v1/slow", json={"hold": True}))
        try:
            assert await asyncio.to_thread(app.state.entered.wait, 30), "first never ran"
            second = await c.post("/v1/slow", json={"s": 0})
        finally:
            app.state.release.set()
        return [(await first).status_code, second.status_code]


async def test_overload_answers_503_after_waiting(limited):
    url, app = limited
    assert await _two_at_once(url, app) == [200, 503]


async def test_overload_without_waiting_room_answers_429(no_waiting_room):
    url, app = no_waiting_room
    codes = await _two_at_once(url, app)
    assert codes == [200, 429]


def test_body_limit_413_by_header_and_while_streaming(limited):
    url, _ = limited
    assert httpx.post(f"{url}/v1/slow", content=b"x" * 5000).status_code == 413

    def chunks() -> Iterator[bytes]:  # no content-length: counted while reading
        for _ in range(10):
            yield b" " * 1000
    r = httpx.post(f"{url}/v1/slow", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_health_readiness_request_id_and_metrics(limited):
    url, app = limited
    assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{url}/readyz").status_code == 200
    app.state.flags["ready"] = False
    r = httpx.get(f"{url}/readyz")
    assert r.status_code == 503 and "model not loaded" in r.text
    r = httpx.post(f"{url}/v1/slow", json={"s": 0}, headers={"x-request-id": "abc123"})
    assert r.headers["x-request-id"] == "abc123"
    assert httpx.post(f"{url}/v1/slow", json={"s": 0}).headers["x-request-id"]
    metrics = httpx.get(f"{url}/metrics").text
    assert 'http_requests_total{code="200",method="POST",route="/v1/slow"}' in metrics
    assert "http_request_seconds_bucket" in metrics
