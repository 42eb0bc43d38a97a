"""What the executor does between HTTP and the model: resolve screenshots, build prompts, call
the backend (one batched call for G thoughts where it can), parse the output into actions."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from coda.actions import to_pyautogui
from coda.contracts.services_api import (
    ActBatchRequest,
    ActBatchResponse,
    ActRequest,
    ActResult,
    HistoryStep,
    ImageRef,
    ParseError,
    Sampling,
)
from coda.imagerefs import ImageRefError, decode_image_ref, open_image, ref_field
from coda.inference.base import ChatBackend, ChatMessage, Completion, GenerateOptions
from coda.inference.images import encode_data_url
from coda.prompts.executor import ExecutorTurn, build_executor_messages, prefill, turn_text
from coda.uitars import ActionParseError, parse_uitars
from executor_service.settings import ExecutorSettings


class InputError(ValueError):
    """A request field that cannot be used; ``loc`` names it (FastAPI's 422 format)."""

    def __init__(self, loc: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = ("body", *loc)
        self.message = message


@dataclass(frozen=True)
class Screenshot:
    data_url: str
    width: int
    height: int


# --- images ---------------------------------------------------------------------------------


def artifact_url(ref: str, base_url: str) -> str:
    """Where ``ref`` lives: URLs and absolute paths as they are, a bare key under ``base_url``
    (a local base made absolute, so :func:`coda.imagerefs.read_ref` reads it as a path)."""
    if "://" in ref or ref.startswith("/"):
        return ref
    if ".." in ref.replace("\\", "/").split("/"):
        raise ValueError("artifact keys may not contain '..'")
    base = base_url if "://" in base_url else os.path.abspath(base_url)
    return f"{base.rstrip('/')}/{ref.lstrip('/')}"


def read_image(image: ImageRef, base_url: str, loc: Sequence[str | int]) -> Screenshot:
    """Decode an :class:`ImageRef` (base64 or artifact ref) to a data URL and its size."""
    field = tuple(loc)
    if image.ref is not None:
        try:
            image = ImageRef(ref=artifact_url(image.ref, base_url))
        except ValueError as exc:
            raise InputError((*field, "ref"), f"cannot read {image.ref!r}: {exc}") from exc
    try:
        raw = decode_image_ref(image, field, base_url)
        width, height = open_image(raw, ref_field(image, field)).size
    except ImageRefError as exc:
        raise InputError(exc.field, str(exc)) from exc
    return Screenshot(data_url=encode_data_url(raw), width=width, height=height)


async def read_images(
    current: ImageRef, history: Sequence[HistoryStep], base_url: str
) -> tuple[Screenshot, list[Screenshot | None]]:
    """The current screenshot and each history step's (``None`` where a step has none)."""

    def work() -> tuple[Screenshot, list[Screenshot | None]]:
        past = [
            None if step.screenshot is None
            else read_image(step.screenshot, base_url, ("history", i, "screenshot"))
            for i, step in enumerate(history)
        ]
        return read_image(current, base_url, ("screenshot",)), past

    return await asyncio.to_thread(work)


# --- prompts and options --------------------------------------------------------------------


def executor_turns(history: Sequence[HistoryStep], shots: Sequence[Screenshot | None],
                   ) -> list[ExecutorTurn]:
    return [
        ExecutorTurn(screenshot_url=shot.data_url if shot else None,
                     text=turn_text(step.thought, step.action_text))
        for step, shot in zip(history, shots, strict=True)
    ]


def generate_options(sampling: Sampling) -> GenerateOptions:
    """One sample per prompt, continuing the pre-filled assistant message."""
    return GenerateOptions(
        n=1, temperature=sampling.temperature, top_p=sampling.top_p,
        max_tokens=sampling.max_tokens, seed=sampling.seed, continue_final_message=True,
    )


async def generate_each(
    backend: ChatBackend, prompts: list[list[ChatMessage]], options: GenerateOptions
) -> list[Completion]:
    """One completion per prompt: ONE ``chat_batch`` call when the backend has it (one batched
    ``generate`` for transformers), otherwise concurrent ``chat`` calls (vLLM batches those)."""
    chat_batch = getattr(backend, "chat_batch", None)
    if callable(chat_batch):
        groups = await chat_batch(prompts, options)
    else:
        groups = await asyncio.gather(*(backend.chat(p, options) for p in prompts))
    out: list[Completion] = []
    for group in groups:
        first = group if isinstance(group, Completion) else group[0]
        out.append(first)
    return out


# --- output -> result -----------------------------------------------------------------------


def to_result(completion: str, thought: str, *, screen_w: int, screen_h: int, shot: Screenshot,
              settings: ExecutorSettings, latency_ms: float = 0.0) -> ActResult:
    """Parse the model's continuation of the pre-fill; a failure is a typed error, not a raise."""
    geometry = {"image_w": shot.width, "image_h": shot.height,
                "max_pixels": settings.max_pixels, "min_pixels": settings.min_pixels}
    try:
        parsed = parse_uitars(prefill(thought) + completion, screen_w, screen_h, **geometry)
    except ActionParseError as first_error:
        try:  # the model may have restarted with its own "Thought: ...\nAction: ..."
            parsed = parse_uitars(completion, screen_w, screen_h, **geometry)
        except ActionParseError:
            return ActResult(raw=completion, latency_ms=latency_ms,
                             error=ParseError(message=first_error.message, text=completion))
    return ActResult(action=parsed.action, pyautogui=to_pyautogui(parsed.action), raw=completion,
                     latency_ms=latency_ms)


async def act_many(
    backend: ChatBackend, settings: ExecutorSettings, *, instruction: str, thoughts: list[str],
    screenshot: ImageRef, history: list[HistoryStep], screen_w: int, screen_h: int,
    sampling: Sampling,
) -> list[ActResult]:
    """Ground every thought on the same state; all prompts go to the backend together."""
    start = time.perf_counter()
    shot, past = await read_images(screenshot, history, settings.artifacts_url)
    turns = executor_turns(history, past)
    prompts = [
        build_executor_messages(instruction, turns, shot.data_url, thought,
                                language=settings.language, history_n=settings.history_n)
        for thought in thoughts
    ]
    completions = await generate_each(backend, prompts, generate_options(sampling))
    latency = (time.perf_counter() - start) * 1000
    return [
        to_result(c.text, thought, screen_w=screen_w, screen_h=screen_h, shot=shot,
                  settings=settings, latency_ms=latency)
        for c, thought in zip(completions, thoughts, strict=True)
    ]


async def act(backend: ChatBackend, settings: ExecutorSettings, req: ActRequest) -> ActResult:
    (result,) = await act_many(
        backend, settings, instruction=req.instruction, thoughts=[req.thought],
        screenshot=req.screenshot, history=req.history, screen_w=req.screen_width,
        screen_h=req.screen_height, sampling=req.sampling)
    return result


async def act_batch(backend: ChatBackend, settings: ExecutorSettings,
                    req: ActBatchRequest) -> ActBatchResponse:
    start = time.perf_counter()
    results = await act_many(
        backend, settings, instruction=req.instruction, thoughts=req.thoughts,
        screenshot=req.screenshot, history=req.history, screen_w=req.screen_width,
        screen_h=req.screen_height, sampling=req.sampling)
    return ActBatchResponse(results=results, latency_ms=(time.perf_counter() - start) * 1000)
