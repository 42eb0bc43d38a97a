"""The ``ocr`` executor backend: the real rapidocr engine on a rendered screen, one OCR pass per
distinct screenshot, its answers in UI-TARS-1.5's grammar, its model files hashed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coda.grounding import Decision, OcrLine
from coda.inference.base import GenerateOptions
from coda.inference.factory import make_backend
from coda.inference.ocr_executor import (
    OcrExecutorBackend,
    RapidOcrEngine,
    action_text,
    answer,
    quote,
    read_conversation,
    to_model_point,
)
from coda.inference.spec import BackendSpec
from coda.prompts.executor import build_executor_messages
from coda.uitars import parse_uitars, smart_resize
from tests.fixtures.ocr_screen import data_url, render

CONTINUE = GenerateOptions(continue_final_message=True)


@pytest.fixture(scope="module")
def engine() -> RapidOcrEngine:
    return RapidOcrEngine()


def _messages(thought: str, url: str) -> list[dict]:
    return build_executor_messages("Save the file", [], url, thought)


def test_read_conversation_takes_the_prefill_and_the_current_screenshot() -> None:
    messages = _messages("Thought: I click 'OK'.\nAction: click(start_box='(1,2)')",
                         "data:image/png;base64,AAAA")
    plan, url = read_conversation(messages)
    assert plan == "I click 'OK'." and url == "data:image/png;base64,AAAA"


def test_quote_round_trips_through_the_parser() -> None:
    text = "it's a\\b\nnext"
    parsed = parse_uitars(f"Action: type(content='{quote(text)}')", 100, 100)
    assert parsed.action.text == text  # type: ignore[union-attr]


def test_points_are_in_the_smart_resized_image() -> None:
    rh, rw = smart_resize(1000, 1500, max_pixels=640 * 28 * 28)
    assert rw < 1500  # the budget shrinks the image, so the point must be scaled
    mx, my = to_model_point(750, 500, 1500, 1000, max_pixels=640 * 28 * 28)
    assert (mx, my) == (round(750 * rw / 1500), round(500 * rh / 1000))
    text = action_text(Decision("click", x=750, y=500), 1500, 1000, max_pixels=640 * 28 * 28)
    parsed = parse_uitars("Action: " + text, 1500, 1000, max_pixels=640 * 28 * 28)
    assert abs(parsed.action.x - 750) <= 2 and abs(parsed.action.y - 500) <= 2  # type: ignore[union-attr]


@pytest.mark.parametrize(("decision", "kind"), [
    (Decision("click", x=10, y=10), "click"),
    (Decision("double_click", x=10, y=10), "double_click"),
    (Decision("right_click", x=10, y=10), "right_click"),
    (Decision("type", text="a'b\n"), "type"),
    (Decision("hotkey", text="ctrl s"), "hotkey"),
    (Decision("scroll", text="up"), "scroll"),
    (Decision("scroll", x=5, y=5, text="down"), "scroll"),
    (Decision("finished"), "done"),
    (Decision("ungrounded", reason="no 'X'"), "wait"),
])
def test_every_answer_parses(decision: Decision, kind: str) -> None:
    prefill = "Thought: a plan\nAction: "
    text = answer("a plan", decision, 200, 100, continuing=True)
    try:
        parsed = parse_uitars(prefill + text, 200, 100)
    except ValueError:  # the restarted form, as the service's second try reads it
        parsed = parse_uitars(text, 200, 100)
    assert parsed.action.type == kind
    if decision.kind == "ungrounded":
        assert parsed.thought is not None and "no 'X'" in parsed.thought


def test_factory_builds_it_and_checks_the_engine_name() -> None:
    backend = make_backend(BackendSpec(backend="ocr", model="rapidocr"))
    assert isinstance(backend, OcrExecutorBackend) and backend.name == "ocr"
    with pytest.raises(ValueError, match="rapidocr"):
        make_backend(BackendSpec(backend="ocr", model="tesseract"))


def test_model_files_are_hashed_and_unchanged(engine: RapidOcrEngine) -> None:
    backend = OcrExecutorBackend(engine)
    files = backend.model_files()
    assert files and all(name.endswith(".onnx") for name in files)
    assert all(len(h) == 64 for h in files.values())
    for name in files:
        assert (engine.package_dir / name).is_file()
    assert backend.check_model_files()
    info = asyncio.run(backend.ready())
    assert info["model_files"] == files and info["engine"] == "rapidocr"


@pytest.mark.slow
def test_rapidocr_reads_the_rendered_labels(engine: RapidOcrEngine) -> None:
    image, boxes = render()
    lines = engine(image)
    texts = {line.text for line in lines}
    assert {"File", "Hide toolbars", "Save As", "OK", "Cancel"} <= texts, texts
    ok = next(line for line in lines if line.text == "OK")
    x0, y0, x1, y1 = boxes["OK"]
    cx, cy = ok.centre
    assert x0 - 4 <= cx <= x1 + 4 and y0 - 4 <= cy <= y1 + 4


@pytest.mark.slow
def test_backend_grounds_a_group_with_one_ocr_pass(engine: RapidOcrEngine) -> None:
    image, boxes = render()
    url = data_url(image)
    backend = OcrExecutorBackend(engine)
    thoughts = ["I click Hide toolbars.", "I click the 'Cancel' button.",
                "I type 'report.tex' and press Enter.", "I save with Ctrl+S.",
                "I click the 'Preferences' button."]
    groups = asyncio.run(backend.chat_batch([_messages(t, url) for t in thoughts], CONTINUE))
    assert backend.ocr_passes == 1 and backend.cache_hits == len(thoughts) - 1
    w, h = image.size
    results = []
    for thought, (completion,) in zip(thoughts, groups, strict=True):
        prefill = f"Thought: {thought}\nAction: "
        try:
            results.append(parse_uitars(prefill + completion.text, w, h))
        except ValueError:
            results.append(parse_uitars(completion.text, w, h))
    for label, parsed in (("Hide toolbars", results[0]), ("Cancel", results[1])):
        x0, y0, x1, y1 = boxes[label]
        act = parsed.action
        assert act.type == "click"
        assert x0 <= act.x <= x1 and y0 <= act.y <= y1, (label, act)  # type: ignore[union-attr]
    assert results[2].action.text == "report.tex\n"  # type: ignore[union-attr]
    assert results[3].action.keys == ["ctrl", "s"]  # type: ignore[union-attr]
    assert results[4].action.type == "wait" and "Preferences" in (results[4].thought or "")


def test_backend_never_raises_on_a_bad_screenshot() -> None:
    backend = OcrExecutorBackend(lambda image: [OcrLine("OK", 0, 0, 10, 10)])
    (c,) = asyncio.run(backend.chat(_messages("I click 'OK'.", "data:image/png;base64,AAAA"),
                                    CONTINUE))
    assert "cannot be read" in c.text and c.text.endswith("wait()")
    no_image = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Thought: x"}]
    (c,) = asyncio.run(backend.chat(no_image, CONTINUE))
    assert "no screenshot" in c.text


def test_cache_is_bounded(tmp_path: Path) -> None:
    backend = OcrExecutorBackend(lambda image: [], cache_size=2)
    for color in range(4):
        image, _ = render({}, size=(64 + color, 64))
        asyncio.run(backend.chat(_messages("I click 'OK'.", data_url(image)), CONTINUE))
    assert backend.ocr_passes == 4 and len(backend._cache) == 2
