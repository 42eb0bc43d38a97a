"""Executor service fixtures: screenshots and the service over real HTTP on the tiny model."""

from __future__ import annotations

import base64
import io
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from PIL import Image

from executor_service.app import create_app
from executor_service.settings import ExecutorSettings
from tests.fixtures.models import free_port

START_TIMEOUT_S = 120.0


def png_bytes(width: int = 320, height: int = 200, color: tuple[int, int, int] = (40, 90, 200),
              ) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def png_b64(width: int = 320, height: int = 200) -> str:
    return base64.b64encode(png_bytes(width, height)).decode("ascii")


@dataclass(frozen=True)
class RunningExecutor:
    url: str
    settings: ExecutorSettings
    artifacts: Path


@pytest.fixture(scope="module")
def executor_server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                    ) -> Iterator[RunningExecutor]:
    """The executor app under uvicorn (own thread), built from settings like in production:
    the transformers backend loads the tiny random Qwen2.5-VL in the background."""
    artifacts = tmp_path_factory.mktemp("executor-artifacts")
    settings = ExecutorSettings(backend="transformers", model=str(tiny_model_dir),
                                artifacts_url=str(artifacts), host="127.0.0.1", port=free_port())
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=settings.host,
                                           port=settings.port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://{settings.host}:{settings.port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError("executor service did not become ready")
        time.sleep(0.2)
    try:
        yield RunningExecutor(url=url, settings=settings, artifacts=artifacts)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
