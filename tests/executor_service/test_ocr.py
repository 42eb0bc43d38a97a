"""The executor service with the ``ocr`` backend built from its settings (factory, real
rapidocr): the production route, parser and coordinate mapping ground a group of plans on a
rendered screen with one OCR pass, and the service says what it could not ground."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from coda.contracts.services_api import ActBatchRequest, ActBatchResponse, ImageRef, Sampling
from executor_service.app import create_app
from executor_service.settings import ExecutorSettings
from tests.fixtures.ocr_screen import png, render
from tests.fixtures.services import TOKENS, asgi_client

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("screen", [(1280, 800), (1920, 1200)])
async def test_ocr_backend_through_the_batch_route(tmp_path: Path,
                                                   screen: tuple[int, int]) -> None:
    image, boxes = render()
    settings = ExecutorSettings(backend="ocr", model="rapidocr", artifacts_url=str(tmp_path),
                                **TOKENS.env())
    app = create_app(settings)
    thoughts = ["The menu bar is at the top. I open the Edit menu.",
                "A dialog asks to confirm. I click the 'OK' button.",
                "I double-click Save As.",
                "I type \"p:=log(3)/log(2)\" and press Enter.",
                "I press Escape to close the dialog.",
                "I click the 'Preferences' button.",
                "The file is saved. The task is complete."]
    req = ActBatchRequest(instruction="Do the task", thoughts=thoughts,
                          screenshot=ImageRef(b64=base64.b64encode(png(image)).decode()),
                          screen_width=screen[0], screen_height=screen[1],
                          sampling=Sampling(temperature=0.0, max_tokens=64))
    async with asgi_client(app) as http:
        ready = (await http.get("/readyz")).json()["detail"]["executor"]
        assert ready["backend"] == "ocr" and ready["model_files"]
        resp = await http.post("/v1/act/batch", json=req.model_dump(mode="json",
                                                                     exclude_none=True))
        assert resp.status_code == 200, resp.text
        results = ActBatchResponse.model_validate(resp.json()).results
        backend = app.state.model.backends["executor"]
        assert backend.ocr_passes == 1  # G plans on one screen: one OCR pass
    sx, sy = screen[0] / image.width, screen[1] / image.height
    for label, result, kind in (("Edit", results[0], "click"), ("OK", results[1], "click"),
                                ("Save As", results[2], "double_click")):
        x0, y0, x1, y1 = boxes[label]
        act = result.action
        assert act is not None and act.type == kind, result
        assert x0 * sx - 2 <= act.x <= x1 * sx + 2, (label, act)  # type: ignore[union-attr]
        assert y0 * sy - 2 <= act.y <= y1 * sy + 2, (label, act)  # type: ignore[union-attr]
        assert result.pyautogui
    assert results[3].action is not None and results[3].action.type == "type"
    assert results[3].action.text == "p:=log(3)/log(2)\n"
    assert results[4].action is not None and results[4].action.type == "hotkey"
    assert results[4].action.keys == ["escape"]
    ungrounded = results[5]
    assert ungrounded.error is None and ungrounded.action is not None
    assert ungrounded.action.type == "wait" and "Preferences" in ungrounded.raw
    assert results[6].action is not None and results[6].action.type == "done"
