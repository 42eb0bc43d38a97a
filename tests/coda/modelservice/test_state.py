"""The one state/lifespan shape: models load in the background, a load that fails is
reported with its real error (an ImportError included) by /readyz and by the routes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import coda.inference.factory
from executor_service.app import create_app as create_executor
from executor_service.settings import ExecutorSettings
from tests.fixtures.images import image_b64
from tests.fixtures.services import TOKENS, asgi_client
from tests.fixtures.waiting import wait_for_async

BODY = {"instruction": "x", "thought": "y", "screenshot": {"b64": image_b64((56, 56))},
        "sampling": {"max_tokens": 2}}


async def _until_failed(http: Any) -> dict[str, Any]:
    async def failed() -> dict[str, Any] | None:
        resp = await http.get("/readyz")
        if resp.status_code == 503 and resp.json()["detail"].get("error") not in (
                None, "model loading"):
            return dict(resp.json())
        return None

    return await wait_for_async(failed, "/readyz to report the failed load", interval=0.05)


async def test_a_real_import_error_is_reported_as_such(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    def broken(_: object) -> None:
        raise ImportError("cannot import name 'Qwen9Model' from 'transformers'")

    monkeypatch.setattr(coda.inference.factory, "make_backend", broken)
    app = create_executor(ExecutorSettings(model="m", artifacts_url=str(tmp_path),
                                           **TOKENS.env()))
    async with asgi_client(app, wait_ready=False) as http:
        ready = await _until_failed(http)
        assert ready["detail"]["error"] == ("ImportError: cannot import name 'Qwen9Model' from "
                                            "'transformers'")
        resp = await http.post("/v1/act", json=BODY)
    assert resp.status_code == 503 and "ImportError: cannot import name" in resp.text
    assert "not installed" not in resp.text


async def test_a_model_that_does_not_load_is_a_503_with_its_error(tmp_path: Path) -> None:
    app = create_executor(ExecutorSettings(model=str(tmp_path / "no-model"),
                                           artifacts_url=str(tmp_path), **TOKENS.env()))
    async with asgi_client(app, wait_ready=False) as http:
        ready = await _until_failed(http)
        resp = await http.post("/v1/act", json=BODY)
    assert "Error" in ready["detail"]["error"]
    assert resp.status_code == 503 and resp.headers["retry-after"] == "5"
    assert resp.json()["detail"].startswith("model not loaded: ")
