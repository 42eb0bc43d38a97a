"""The judge service on the tiny real model (two ensemble members), served by uvicorn."""

from __future__ import annotations

import base64
import io
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import uvicorn
from PIL import Image

from coda.clients.judge import JudgeClient
from coda.procs import free_port
from judge_service.app import create_app
from judge_service.settings import JudgeModelSpec, JudgeSettings


def png_b64(color: tuple[int, int, int] = (30, 30, 200), size: tuple[int, int] = (112, 70)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


@pytest.fixture(scope="module")
def judge_url(tiny_model_dir: Path) -> Iterator[str]:
    """A real judge service (uvicorn, own thread) with models 'a' and 'b' on the tiny model."""
    options = {"model_path": str(tiny_model_dir), "device": "cpu", "max_pixels": 56 * 56}
    settings = JudgeSettings(
        models=[JudgeModelSpec(name="a", backend="transformers", options=options),
                JudgeModelSpec(name="b", backend="transformers", options=options)],
        max_tokens=8, top_p=0.9)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("judge service did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture
async def judge(judge_url: str) -> AsyncIterator[JudgeClient]:
    client = JudgeClient(judge_url, retries=1, timeout=120)
    try:
        yield client
    finally:
        await client.aclose()
