"""What the executor does between HTTP and the model: read the screenshots the prompt shows,
build prompts, call the backend (one batched call for G thoughts where it can), parse the
output into actions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from coda.actions import to_pyautogui
from coda.contracts.services_api import (
    ActBatchResponse,
    ActResult,
    HistoryStep,
    ImageRef,
    ParseError,
    Sampling,
)
from coda.imagerefs import FieldPath, ScreenshotReader
from coda.inference.base import ChatBackend, ChatMessage, Completion, GenerateOptions
from coda.inference.images import encode_data_url
from coda.prompts.executor import ExecutorTurn, build_executor_messages, prefill, turn_text
from coda.service import current_cancel_event
from coda.uitars import ActionParseError, parse_uitars
from executor_service.settings import ExecutorSettings


@dataclass(frozen=True)
class Screenshot:
    data_url: str
    width: int
    height: int


# --- images ---------------------------------------------------------------------------------


def read_screenshot(reader: ScreenshotReader, image: ImageRef, field: FieldPath) -> Screenshot:
    checked = reader.read(image, field)
    width, height = checked.size
    return Screenshot(data_url=encode_data_url(checked.data), width=width, height=height)


def shown_history(history: Sequence[HistoryStep], history_n: int) -> set[int]:
    """Indices of the past steps whose screenshots the prompt shows: the last
    ``history_n - 1`` that have one (the builder drops the others anyway)."""
    with_image = [i for i, step in enumerate(history) if step.screenshot is not None]
    return set(with_image[max(0, len(with_image) - (history_n - 1)):])


async def read_images(reader: ScreenshotReader, current: ImageRef,
                      history: Sequence[HistoryStep], history_n: int,
                      ) -> tuple[Screenshot, list[Screenshot | None]]:
    """The current screenshot and each shown history step's (``None`` for the others)."""
    shown = shown_history(history, history_n)

    def work() -> tuple[Screenshot, list[Screenshot | None]]:
        past: list[Screenshot | None] = []
        for i, step in enumerate(history):
            if i in shown and step.screenshot is not None:
                past.append(read_screenshot(reader, step.screenshot, ("history", i, "screenshot")))
            else:
                past.append(None)
        return read_screenshot(reader, current, ("screenshot",)), past

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
    """One sample per prompt, continuing the pre-filled assistant message; generation stops
    when the request is cancelled (client gone, deadline)."""
    return GenerateOptions(
        n=1, temperature=sampling.temperature, top_p=sampling.top_p,
        max_tokens=sampling.max_tokens, seed=sampling.seed, continue_final_message=True,
        cancel=current_cancel_event(),
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
    backend: ChatBackend, settings: ExecutorSettings, reader: ScreenshotReader, *,
    instruction: str, thoughts: list[str], screenshot: ImageRef, history: list[HistoryStep],
    screen_w: int, screen_h: int, sampling: Sampling,
) -> list[ActResult]:
    """Ground every thought on the same state; all prompts go to the backend together."""
    start = time.perf_counter()
    shot, past = await read_images(reader, screenshot, history, settings.history_n)
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


def batch_response(results: list[ActResult], start: float) -> ActBatchResponse:
    return ActBatchResponse(results=results, latency_ms=(time.perf_counter() - start) * 1000)
