"""Bounded resources: decompression bombs, slow bodies, abandoned and overlong generations
cannot take a model service down. A planner process of its own with small limits (2 slots,
2 s to send a body, a 6 s deadline), real sockets."""

from __future__ import annotations

import asyncio
import base64
import socket
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from coda_app.services import ServiceProcess
from tests.fixtures.images import image_b64, raw_png
from tests.fixtures.services import TOKENS, RunningService, Store, planner_settings


def png_of_zeros(width: int, height: int, *, color_type: int = 2, depth: int = 8) -> bytes:
    """A VALID PNG of one colour (all zero bytes), streamed through zlib: a few MB that decode
    to width x height pixels."""
    row = b"\x00" * (1 + (width * {2: 3, 0: 1}[color_type] * depth + 7) // 8)
    packer = zlib.compressobj(1)
    parts = [packer.compress(row * 64) for _ in range(height // 64)]
    parts += [packer.compress(row * (height % 64)), packer.flush()]
    return raw_png(width, height, b"".join(parts), depth=depth, color_type=color_type)


@pytest.fixture(scope="module")
def limited_planner(tiny_model_dir: Path, service_store: Store, service_logs: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    settings = planner_settings(tiny_model_dir, service_store,
                                tmp_path_factory.mktemp("limited"), max_concurrency=2,
                                body_timeout_s=2.0, request_timeout_s=6.0, max_tokens=32_768)
    process = ServiceProcess.of("planner", settings, service_logs / "limited-planner.log")
    process.start()
    try:
        process.wait_ready()
        yield RunningService("planner", process, service_store, settings)
    finally:
        process.stop()


# Greedy decoding of the tiny model on this prompt never meets an end token: it runs to
# max_tokens. 32,000 tokens take about 70 s on this project's 2-core machine (4,096 took 6 s,
# too close to the deadline below on a faster CPU); the prompt is about 400 tokens, so it fits
# the model's 32,768-token context. Sampled answers are no good here: they end at random.
ENDLESS = 32_000


def plan(max_tokens: int = 2, **sampling: Any) -> dict[str, Any]:
    return {"instruction": "Plot sin(x)", "screenshot": {"b64": image_b64((56, 56))},
            "sampling": {"max_tokens": max_tokens, "temperature": 0.0, **sampling}}


def rss(svc: RunningService) -> int:
    assert svc.process.proc is not None
    return int(psutil.Process(svc.process.proc.pid).memory_info().rss)


async def test_decompression_bombs_are_refused_before_decoding(
        limited_planner: RunningService) -> None:
    bombs = [png_of_zeros(13_000, 13_000), png_of_zeros(20_000, 20_000, color_type=0, depth=1)]
    async with limited_planner.http() as http:
        assert (await http.post("/v1/plan", json=plan())).status_code == 200
        before = rss(limited_planner)
        answers = await asyncio.gather(*(
            http.post("/v1/plan", json={**plan(), "screenshot": {
                "b64": base64.b64encode(bombs[i % 2]).decode()}}) for i in range(6)))
        grown = rss(limited_planner) - before
        assert [r.status_code for r in answers] == [413] * 6, answers[0].text
        assert all(r.json()["detail"][0]["loc"] == ["body", "screenshot", "b64"]
                   for r in answers)
        # decoding one of them would take 0.5 GB (RGB) / 0.4 GB (1-bit as L): none was
        assert grown < 150 * 1024 * 1024, grown
        assert (await http.post("/v1/plan", json=plan())).status_code == 200
    assert limited_planner.process.alive()


def _slow_body(url: str) -> socket.socket:
    """A connection that sends the headers of a 1000-byte body and one byte of it."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(b"POST /v1/plan HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Authorization: Bearer " + TOKENS.inference.encode() + b"\r\n"
                 b"Content-Length: 1000\r\n\r\n{")
    return sock


async def test_slow_bodies_hold_no_slot_and_time_out(limited_planner: RunningService) -> None:
    slow = [_slow_body(limited_planner.url) for _ in range(6)]  # 3x the 2 slots
    try:
        async with limited_planner.http() as http:
            resp = await http.post("/v1/plan", json=plan())
            assert resp.status_code == 200, resp.text  # not 503: the slow ones hold no slot
        for sock in slow:
            answer = sock.recv(200)
            assert answer.startswith(b"HTTP/1.1 408"), answer
    finally:
        for sock in slow:
            sock.close()


async def test_an_abandoned_generation_stops(limited_planner: RunningService) -> None:
    """A generation far longer than the client waits (ENDLESS); the client leaves after 2 s
    and the next request is answered (the model is free)."""
    async with limited_planner.http(timeout=2.0) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.post("/v1/plan", json=plan(max_tokens=ENDLESS))
    async with limited_planner.http(timeout=30.0) as http:
        resp = await http.post("/v1/plan", json=plan())
    assert resp.status_code == 200, resp.text
    assert "request.client_disconnected" in limited_planner.process.log_tail(20_000)


async def test_every_request_has_a_deadline(limited_planner: RunningService) -> None:
    async with limited_planner.http(timeout=60.0) as http:
        resp = await http.post("/v1/plan", json=plan(max_tokens=ENDLESS))  # ~70 s, 6 s deadline
        assert resp.status_code == 504, resp.text[:300]
        assert (await http.post("/v1/plan", json=plan())).status_code == 200
