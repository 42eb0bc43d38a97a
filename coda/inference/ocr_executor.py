"""An executor backend with no model weights of its own: it reads the screenshot's text with
OCR and grounds the plan on it (:mod:`coda.grounding`), answering in UI-TARS-1.5's grammar.

``CODA_EXECUTOR_BACKEND=ocr`` (``CODA_EXECUTOR_MODEL=rapidocr``). The executor service sends
it the conversation it would send UI-TARS-1.5 (:func:`coda.prompts.executor.
build_executor_messages`): the backend takes the current screenshot (the last image of the
messages) and the plan (the pre-filled assistant message it continues), runs ONE OCR pass per
distinct screenshot (an LRU cache keyed by the image's sha256, so the G plans of a GRPO group
on one screen cost one pass), and answers with the action call that continues the pre-fill:

- a grounded pointer step: ``click(start_box='(x,y)')`` (also ``left_double``,
  ``right_single``, ``scroll``), the point in pixels of the smart-resized screenshot, which is
  how UI-TARS-1.5 answers and how :func:`coda.uitars.parse_uitars` maps it to the screen;
- a typing step: ``type(content='...')``; keys: ``hotkey(key='ctrl s')``; a plan that says the
  task is complete: ``finished()``;
- a step it cannot ground: ``Thought: <what it could not find>\\nAction: wait()``, a restarted
  answer the service's parser accepts (a recorded ``wait`` step, never an error).

The OCR engine is ``rapidocr-onnxruntime`` (PP-OCR detection, direction and recognition models
shipped inside its wheel, run by onnxruntime on CPU). Its model files are hashed (sha256) at
load; :meth:`OcrExecutorBackend.model_files` and ``/readyz`` show the hashes and the backend
logs them at load and again, re-hashed, with ``unchanged`` at shutdown.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from coda.grounding import Decision, OcrLine, decide, line_from_quad
from coda.inference.base import ChatMessage, Completion, GenerateOptions
from coda.inference.images import decode_image, part_url
from coda.logging import get_logger
from coda.prompts.executor import thought_body
from coda.uitars import MAX_PIXELS, MIN_PIXELS, smart_resize

log = get_logger("coda.inference.ocr")

ENGINES = ("rapidocr",)
"""Values of ``CODA_EXECUTOR_MODEL`` the ``ocr`` backend accepts (the OCR engine)."""

Engine = Callable[[Image.Image], list[OcrLine]]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class RapidOcrEngine:
    """``rapidocr_onnxruntime.RapidOCR`` over PIL images, with its model files hashed."""

    name = "rapidocr"

    def __init__(self) -> None:
        import rapidocr_onnxruntime  # the optional extra: pip install -e '.[models]'

        self.package_dir = Path(rapidocr_onnxruntime.__file__).parent
        self.version = getattr(rapidocr_onnxruntime, "__version__", None) or _dist_version()
        self.hashes = self.hash_models()
        if not self.hashes:
            raise RuntimeError(f"no .onnx model files in {self.package_dir}")
        self._ocr = rapidocr_onnxruntime.RapidOCR()
        self._lock = threading.Lock()

    def hash_models(self) -> dict[str, str]:
        """sha256 of every ``.onnx`` file in the package, by its path inside the package."""
        return {str(p.relative_to(self.package_dir)): sha256_file(p)
                for p in sorted(self.package_dir.rglob("*.onnx"))}

    def __call__(self, image: Image.Image) -> list[OcrLine]:
        import numpy as np

        bgr = np.ascontiguousarray(np.asarray(image.convert("RGB"))[:, :, ::-1])
        with self._lock:  # one onnxruntime session set; calls one at a time
            result, _ = self._ocr(bgr)
        return [line_from_quad(box, str(text), float(score)) for box, text, score in result or []]


def _dist_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rapidocr-onnxruntime")
    except PackageNotFoundError:  # pragma: no cover - imported, so installed
        return None


# --- messages -> (plan, screenshot) -------------------------------------------------------------


def _image_urls(content: Any) -> list[str]:
    if not isinstance(content, list):
        return []
    return [part_url(part) for part in content
            if isinstance(part, dict) and part.get("type") == "image_url"]


def _text(content: Any) -> str:
    """The executor's text messages are plain strings (its prompt and its pre-fill)."""
    return content if isinstance(content, str) else ""


def read_conversation(messages: list[ChatMessage]) -> tuple[str, str | None]:
    """The plan (the pre-filled assistant message's thought, else the instruction) and the
    current screenshot's URL (the last image of the messages), from the executor's messages."""
    plan = ""
    if messages and messages[-1].get("role") == "assistant":
        plan = thought_body(_text(messages[-1].get("content")))
    if not plan:
        first = _text(messages[0].get("content")) if messages else ""
        plan = first.rsplit("## User Instruction", 1)[-1].strip()
    url = None
    for message in reversed(messages):
        urls = _image_urls(message.get("content"))
        if urls:
            url = urls[-1]
            break
    return plan, url


# --- decision -> UI-TARS-1.5 text ---------------------------------------------------------------


def quote(text: str) -> str:
    """``text`` as the inside of a single-quoted UI-TARS argument (``\\``, ``'``, newlines)."""
    return (text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
            .replace("\t", "\\t"))


def to_model_point(x: float, y: float, image_w: int, image_h: int, *,
                   max_pixels: int = MAX_PIXELS, min_pixels: int = MIN_PIXELS) -> tuple[int, int]:
    """Image pixels -> pixels of the smart-resized image UI-TARS-1.5 answers in."""
    rh, rw = smart_resize(image_h, image_w, min_pixels=min_pixels, max_pixels=max_pixels)
    return round(x * rw / image_w), round(y * rh / image_h)


POINTER_CALLS = {"click": "click", "double_click": "left_double", "right_click": "right_single"}
"""UI-TARS-1.5's call for each pointer decision."""


def action_text(decision: Decision, image_w: int, image_h: int, *,
                max_pixels: int = MAX_PIXELS, min_pixels: int = MIN_PIXELS) -> str:
    """The UI-TARS-1.5 action call of a grounded decision (``wait()`` when ungrounded)."""
    def box() -> str:
        assert decision.x is not None and decision.y is not None
        mx, my = to_model_point(decision.x, decision.y, image_w, image_h,
                                max_pixels=max_pixels, min_pixels=min_pixels)
        return f"start_box='({mx},{my})'"

    if decision.kind in POINTER_CALLS:
        return f"{POINTER_CALLS[decision.kind]}({box()})"
    if decision.kind == "type":
        return f"type(content='{quote(decision.text or '')}')"
    if decision.kind == "hotkey":
        return f"hotkey(key='{quote(decision.text or '')}')"
    if decision.kind == "scroll":
        where = f"{box()}, " if decision.x is not None else ""
        return f"scroll({where}direction='{decision.text or 'down'}')"
    if decision.kind == "finished":
        return "finished()"
    return "wait()"


def answer(plan: str, decision: Decision, image_w: int, image_h: int, *, continuing: bool,
           max_pixels: int = MAX_PIXELS, min_pixels: int = MIN_PIXELS) -> str:
    """The completion: the action call alone when continuing the pre-fill, else (and always
    for a step it could not ground) ``Thought: ...\\nAction: ...``."""
    call = action_text(decision, image_w, image_h, max_pixels=max_pixels, min_pixels=min_pixels)
    if decision.kind == "ungrounded":
        return f"Thought: OCR grounding failed: {decision.reason}. I wait.\nAction: {call}"
    if continuing:
        return call
    return f"Thought: {plan}\nAction: {call}"


# --- the backend --------------------------------------------------------------------------------


class OcrExecutorBackend:
    """Grounds the executor's plan on the screenshot's OCR text; a
    :class:`~coda.inference.base.ChatBackend` (adapters are names only: nothing to train)."""

    name = "ocr"

    def __init__(self, engine: Engine | None = None, *, max_pixels: int = MAX_PIXELS,
                 min_pixels: int = MIN_PIXELS, cache_size: int = 64) -> None:
        self.engine: Engine = engine if engine is not None else RapidOcrEngine()
        self.max_pixels = max_pixels
        self.min_pixels = min_pixels
        self.cache_size = cache_size
        self._cache: OrderedDict[str, tuple[list[OcrLine], int, int]] = OrderedDict()
        self._ocr_lock = asyncio.Lock()
        self._adapters: dict[str, str] = {}
        self.ocr_passes = 0
        self.cache_hits = 0
        self.calls = 0
        self._hashes = dict(getattr(self.engine, "hashes", {}))
        log.info("ocr.model_files", engine=getattr(self.engine, "name", "custom"),
                 files=self._hashes)

    def model_files(self) -> dict[str, str]:
        """sha256 of the OCR engine's model files as loaded (path inside its package)."""
        return dict(self._hashes)

    def check_model_files(self) -> bool:
        """Re-hash the model files: whether they are what was loaded."""
        rehash = getattr(self.engine, "hash_models", None)
        return not callable(rehash) or rehash() == self._hashes

    async def _lines(self, url: str) -> tuple[list[OcrLine], int, int]:
        key = hashlib.sha256(url.encode()).hexdigest()
        async with self._ocr_lock:  # one pass per distinct screenshot, even when concurrent
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
                return hit

            def work() -> tuple[list[OcrLine], int, int]:
                image = decode_image(url)
                return self.engine(image), image.width, image.height

            value = await asyncio.to_thread(work)
            self.ocr_passes += 1
            self._cache[key] = value
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return value

    async def _one(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        self.calls += 1
        continuing = options.continue_final_message
        try:
            plan, url = read_conversation(messages)
        except ValueError:  # an image part without a URL: no screenshot to read
            plan, url = "", None
        if url is None:
            decision = Decision("ungrounded", reason="the request has no screenshot")
            text = answer(plan, decision, 1, 1, continuing=continuing)
        else:
            try:
                lines, w, h = await self._lines(url)
            except ValueError as exc:  # an undecodable image: a recorded outcome, not a crash
                decision = Decision("ungrounded", reason=f"the screenshot cannot be read: {exc}")
                text = answer(plan, decision, 1, 1, continuing=continuing)
            else:
                decision = decide(plan, lines, image_w=w)
                text = answer(plan, decision, w, h, continuing=continuing,
                              max_pixels=self.max_pixels, min_pixels=self.min_pixels)
        n = max(options.n, 1)
        return [Completion(text=text, completion_tokens=len(text.split()), finish_reason="stop",
                           adapter=options.adapter)] * n

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        return await self._one(messages, options)

    async def chat_batch(self, conversations: Sequence[list[ChatMessage]],
                         options: GenerateOptions) -> list[list[Completion]]:
        """Every conversation, one OCR pass per distinct screenshot among them."""
        return [await self._one(messages, options) for messages in conversations]

    async def load_adapter(self, version: str, path: str) -> None:
        self._adapters[version] = path  # a version name only: OCR has nothing to adapt

    async def unload_adapter(self, version: str) -> None:
        self._adapters.pop(version, None)

    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    async def ready(self) -> dict[str, Any]:
        return {"backend": self.name, "engine": getattr(self.engine, "name", "custom"),
                "engine_version": getattr(self.engine, "version", None),
                "model_files": self.model_files(), "ocr_passes": self.ocr_passes,
                "cache_hits": self.cache_hits}

    async def aclose(self) -> None:
        unchanged = await asyncio.to_thread(self.check_model_files)
        log.info("ocr.model_files", files=self._hashes, unchanged=unchanged,
                 ocr_passes=self.ocr_passes, cache_hits=self.cache_hits, calls=self.calls)


def make_ocr_backend(model: str, *, max_pixels: int | None = None) -> OcrExecutorBackend:
    """The ``ocr`` backend for ``CODA_EXECUTOR_MODEL`` ``model`` (an engine of :data:`ENGINES`)."""
    if model not in ENGINES:
        raise ValueError(f"backend 'ocr': model must name an OCR engine, one of {ENGINES}; "
                         f"got {model!r}")
    return OcrExecutorBackend(RapidOcrEngine(), max_pixels=max_pixels or MAX_PIXELS)
