"""Judging one trajectory with an ensemble: multi-resolution first pass, then voting@k.

A trajectory longer than a model's context is not a failed job: each model walks down
:func:`fit_ladder` (first lower resolutions, then fewer frames) until its server accepts the
conversation, and the verdict records what each model was shown (``Verdict.inputs``). Only a
trajectory that does not fit even at the smallest setting raises
:class:`~coda.inference.base.PromptTooLong` (413, a permanent failure of the judge job).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coda.contracts.services_api import JudgePolicy, JudgeRequest
from coda.contracts.training import JudgeInput, Verdict, Vote
from coda.imagerefs import ScreenshotReader
from coda.inference.base import ChatBackend, GenerateOptions, PromptTooLong
from coda.logging import get_logger
from coda.prompts.judge import JudgeFrame, build_judge_messages
from coda.service import current_cancel_event
from judge_service.aggregate import build_verdict, vote_passes, voting_at_k
from judge_service.frames import high_url, low_url, select_frames
from judge_service.parsing import parse_vote
from judge_service.rules import Answered, RuleJudge
from judge_service.settings import JudgeSettings

log = get_logger("judge_service.judging")

FIT_PIXELS = (1024 * 28 * 28, 256 * 28 * 28, 64 * 28 * 28)
"""Pixel bounds tried, in order, when a trajectory does not fit the context at the configured
resolution (1024, 256 and 64 vision tokens per Qwen2.5-VL frame); the last one is the smallest
resolution, at which the number of frames is then halved down to 2."""


@dataclass(frozen=True)
class Fit:
    """One setting of the ladder: at most ``max_frames`` frames, each at most ``max_pixels``."""

    max_frames: int
    max_pixels: int | None


def fit_ladder(max_frames: int, high_max_pixels: int | None) -> list[Fit]:
    """The settings tried in order (pure): the request's, then lower resolutions, then fewer
    frames at the lowest resolution."""
    ladder = [Fit(max_frames, high_max_pixels)]
    for pixels in FIT_PIXELS:
        if high_max_pixels is None or pixels < high_max_pixels:
            ladder.append(Fit(max_frames, pixels))
    frames = max_frames
    while frames > 2:
        frames = max(2, frames // 2)
        ladder.append(Fit(frames, ladder[-1].max_pixels))
    return ladder


@dataclass(frozen=True)
class Conversations:
    """The judge conversation at low resolution (None when not used) and at high resolution."""

    low: list[dict[str, Any]] | None
    high: list[dict[str, Any]]


def frame_urls(req: JudgeRequest, indices: list[int], reader: ScreenshotReader,
               high_max_pixels: int | None) -> tuple[list[str], list[str] | None]:
    """The high- and low-resolution data URLs of the selected frames, one frame decoded at a
    time (memory holds one full screenshot, whatever the trajectory's length). Blocking."""
    policy = req.policy
    high: list[str] = []
    low: list[str] | None = [] if policy.multi_resolution else None
    for i in indices:
        checked = reader.read(req.steps[i].screenshot, ("steps", i, "screenshot"))
        high.append(high_url(checked, high_max_pixels))
        if low is not None:
            low.append(low_url(checked, policy.low_resolution, high_max_pixels))
    return high, low


async def prepare(req: JudgeRequest, fit: Fit, reader: ScreenshotReader) -> Conversations:
    """Select frames, read them once, and build both conversations."""
    indices = select_frames(len(req.steps), fit.max_frames)
    high, low = await asyncio.to_thread(frame_urls, req, indices, reader, fit.max_pixels)

    def frames(urls: Sequence[str]) -> list[JudgeFrame]:
        return [JudgeFrame(step=i + 1, image_url=url, thought=req.steps[i].thought,
                           action=req.steps[i].action)
                for i, url in zip(indices, urls, strict=True)]

    return Conversations(
        low=build_judge_messages(req.instruction, frames(low)) if low is not None else None,
        high=build_judge_messages(req.instruction, frames(high)))


async def judge_with_model(name: str, backend: ChatBackend, conv: Conversations,
                           policy: JudgePolicy, settings: JudgeSettings) -> tuple[list[Vote], bool]:
    """One model's votes and pass/fail: a low-resolution vote first (when enabled); only if
    it passes, ``policy.votes`` high-resolution votes in one call; pass = all votes pass."""
    votes: list[Vote] = []
    if conv.low is not None:
        opts = GenerateOptions(n=1, temperature=policy.temperature, top_p=settings.top_p,
                               max_tokens=settings.max_tokens, cancel=current_cancel_event())
        low = await backend.chat(conv.low, opts)
        votes += [parse_vote(c.text, model=name, resolution="low") for c in low]
        if not all(vote_passes(v) for v in votes) or not votes:
            return votes, False
    opts = GenerateOptions(n=policy.votes, temperature=policy.temperature, top_p=settings.top_p,
                           max_tokens=settings.max_tokens, cancel=current_cancel_event())
    high = [parse_vote(c.text, model=name, resolution="high")
            for c in await backend.chat(conv.high, opts)]
    return votes + high, voting_at_k(high)


class Prepared:
    """The conversations of each setting of the ladder, built once and shared by the models."""

    def __init__(self, req: JudgeRequest, reader: ScreenshotReader) -> None:
        self.req = req
        self.reader = reader
        self._built: dict[Fit, asyncio.Task[Conversations]] = {}

    async def get(self, fit: Fit) -> Conversations:
        if fit not in self._built:
            self._built[fit] = asyncio.ensure_future(prepare(self.req, fit, self.reader))
        return await self._built[fit]


async def judge_fitted(name: str, backend: ChatBackend, prepared: Prepared,
                       settings: JudgeSettings) -> tuple[list[Vote], bool, JudgeInput]:
    """:func:`judge_with_model` at the first setting of the ladder the model's context takes."""
    req = prepared.req
    ladder = fit_ladder(req.policy.max_frames, settings.high_max_pixels)
    refused: PromptTooLong | None = None
    for i, fit in enumerate(ladder):
        try:
            votes, ok = await judge_with_model(name, backend, await prepared.get(fit),
                                               req.policy, settings)
        except PromptTooLong as exc:
            refused = exc
            log.info("judge.context_exceeded", model=name, max_frames=fit.max_frames,
                     max_pixels=fit.max_pixels, error=str(exc))
            continue
        shown = [k + 1 for k in select_frames(len(req.steps), fit.max_frames)]
        return votes, ok, JudgeInput(model=name, steps=shown, max_pixels=fit.max_pixels,
                                     reduced=i > 0, refusals=i)
    assert refused is not None  # the ladder is never empty
    raise PromptTooLong(refused.prompt_tokens, refused.max_tokens, refused.context)


async def judge_by_rules(name: str, rules: RuleJudge, req: JudgeRequest,
                         reader: ScreenshotReader, settings: JudgeSettings,
                         ) -> tuple[list[Vote], bool, JudgeInput]:
    """The rule-based judge's votes: its one answer for the trajectory (every step, as
    captured), voted on as a model's replies are (:func:`judge_with_model`: the low-resolution
    vote first when enabled, then ``policy.votes`` votes)."""
    answered = Answered(name, await rules.answer(req, reader))
    conv = Conversations(low=[] if req.policy.multi_resolution else None, high=[])
    votes, ok = await judge_with_model(name, answered, conv, req.policy, settings)
    return votes, ok, JudgeInput(model=name, steps=list(range(1, len(req.steps) + 1)))


async def judge(req: JudgeRequest, backends: Mapping[str, ChatBackend],
                settings: JudgeSettings, reader: ScreenshotReader) -> Verdict:
    """The ensemble verdict over ``backends`` (already narrowed to ``policy.models``)."""
    prepared = Prepared(req, reader)
    results = await asyncio.gather(*(
        judge_by_rules(name, backend, req, reader, settings) if isinstance(backend, RuleJudge)
        else judge_fitted(name, backend, prepared, settings)
        for name, backend in backends.items()))
    votes = [v for model_votes, _, _ in results for v in model_votes]
    passed = {name: ok for name, (_, ok, _) in zip(backends, results, strict=True)}
    verdict = build_verdict(votes, passed, n_steps=len(req.steps), rule=req.policy.label_rule)
    return verdict.model_copy(update={"inputs": [shown for _, _, shown in results]})
