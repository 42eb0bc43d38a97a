"""Pure parts of the executor: output -> result, the screenshots a prompt shows, options."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from coda.actions import Click, Scroll, TypeText, Wait
from coda.artifacts import ArtifactStore
from coda.contracts.services_api import HistoryStep, ImageRef, Sampling
from coda.imagerefs import ImageRefError, ScreenshotReader
from executor_service.logic import (
    Screenshot,
    generate_options,
    read_screenshot,
    shown_history,
    to_result,
)
from executor_service.settings import ExecutorSettings
from tests.fixtures.images import image_bytes

SHOT = Screenshot(data_url="data:image/png;base64,", width=1280, height=800)
SETTINGS = ExecutorSettings()


@pytest.mark.parametrize(
    ("completion", "action"),
    [
        ("click(start_box='<|box_start|>(644,406)<|box_end|>')", Click(x=640, y=400)),
        ("scroll(start_box='(322,203)', direction='down')",
         Scroll(x=320, y=200, direction="down")),
        ("type(content='hello\\n')", TypeText(text="hello\n")),
        # the model restarted with its own Thought/Action: the fallback still finds it
        ("Thought: hm\nAction: wait()", Wait()),
    ],
)
def test_to_result_continues_the_prefill(completion: str, action: object) -> None:
    result = to_result(completion, "Thought: Click it.\nAction: click", screen_w=1280,
                       screen_h=800, shot=SHOT, settings=SETTINGS)
    assert result.error is None and result.action == action
    assert result.raw == completion and result.pyautogui


def test_to_result_garbage_is_a_typed_error() -> None:
    result = to_result("ĠĠ((0123 Ġsystem", "Click it.", screen_w=1280, screen_h=800, shot=SHOT,
                       settings=SETTINGS)
    assert result.action is None and result.error is not None
    assert result.error.text == "ĠĠ((0123 Ġsystem"


def test_to_result_maps_from_the_screenshot_size() -> None:
    hidpi = to_result("click(start_box='(644,406)')", "c", screen_w=2560, screen_h=1600,
                      shot=SHOT, settings=SETTINGS)
    assert hidpi.action == Click(x=1280, y=800)


def test_read_screenshot(tmp_path: Path) -> None:
    key = ArtifactStore(str(tmp_path)).put(image_bytes((64, 40)), "image/png")
    reader = ScreenshotReader(str(tmp_path))
    shot = read_screenshot(reader, ImageRef(ref=key), ("screenshot",))
    assert (shot.width, shot.height) == (64, 40)
    assert shot.data_url.startswith("data:image/png;base64,")
    inline = read_screenshot(reader, ImageRef(b64=base64.b64encode(image_bytes((8, 6))).decode()),
                             ("s",))
    assert (inline.width, inline.height) == (8, 6)
    with pytest.raises(ImageRefError) as info:
        read_screenshot(reader, ImageRef(ref=f"sha256/ab/{'ab' * 32}.png"),
                        ("history", 2, "screenshot"))
    assert info.value.field == ("history", 2, "screenshot", "ref")


def test_only_the_shown_history_screenshots_are_read() -> None:
    shot = ImageRef(ref=f"sha256/ab/{'ab' * 32}.png")
    history = [HistoryStep(thought=str(i), screenshot=shot if i != 5 else None)
               for i in range(8)]
    assert shown_history(history, history_n=5) == {3, 4, 6, 7}
    assert shown_history(history, history_n=1) == set()


def test_generate_options() -> None:
    opts = generate_options(Sampling(temperature=0.5, top_p=0.8, max_tokens=64, seed=3))
    assert (opts.n, opts.temperature, opts.top_p, opts.max_tokens, opts.seed) == (
        1, 0.5, 0.8, 64, 3)
    assert opts.continue_final_message
