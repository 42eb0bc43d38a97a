"""The planner service on the tiny real model, reached over ASGI HTTP through PlannerClient."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from coda.artifacts import ArtifactStore
from coda.clients.planner import PlannerClient
from planner_service.app import create_app
from planner_service.settings import PlannerSettings


def png_bytes(color: tuple[int, int, int] = (200, 30, 30),
              size: tuple[int, int] = (56, 56)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def png_b64(color: tuple[int, int, int] = (200, 30, 30)) -> str:
    return base64.b64encode(png_bytes(color)).decode("ascii")


@pytest.fixture(scope="module")
def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("planner-artifacts")


@pytest.fixture(scope="module")
def screenshot_key(artifacts_dir: Path) -> str:
    """The key of a screenshot stored in the planner's artifact store."""
    return ArtifactStore(f"file://{artifacts_dir}").put(png_bytes((10, 200, 10)), "image/png")


@pytest.fixture(scope="module")
async def planner(tiny_model_dir: Path, artifacts_dir: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PlannerClient]:
    settings = PlannerSettings(
        backend="transformers", model=str(tiny_model_dir), device="cpu", max_pixels=56 * 56,
        artifacts_url=f"file://{artifacts_dir}",
        adapter_cache_dir=str(tmp_path_factory.mktemp("adapter-cache")))
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://planner") as http:
            yield PlannerClient("http://planner", client=http, retries=1)
