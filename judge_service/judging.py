"""Judging one trajectory with an ensemble: multi-resolution first pass, then voting@k."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coda.contracts.services_api import JudgePolicy, JudgeRequest
from coda.contracts.training import Verdict, Vote
from coda.imagerefs import ScreenshotReader
from coda.inference.base import ChatBackend, GenerateOptions
from coda.prompts.judge import JudgeFrame, build_judge_messages
from coda.service import current_cancel_event
from judge_service.aggregate import build_verdict, vote_passes, voting_at_k
from judge_service.frames import high_url, low_url, select_frames
from judge_service.parsing import parse_vote
from judge_service.settings import JudgeSettings


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
            low.append(low_url(checked, policy.low_resolution))
    return high, low


async def prepare(req: JudgeRequest, settings: JudgeSettings,
                  reader: ScreenshotReader) -> Conversations:
    """Select frames, read them once, and build both conversations."""
    indices = select_frames(len(req.steps), req.policy.max_frames)
    high, low = await asyncio.to_thread(frame_urls, req, indices, reader,
                                        settings.high_max_pixels)

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


async def judge(req: JudgeRequest, backends: Mapping[str, ChatBackend],
                settings: JudgeSettings, reader: ScreenshotReader) -> Verdict:
    """The ensemble verdict over ``backends`` (already narrowed to ``policy.models``)."""
    conv = await prepare(req, settings, reader)
    results = await asyncio.gather(*(
        judge_with_model(name, backend, conv, req.policy, settings)
        for name, backend in backends.items()))
    votes = [v for model_votes, _ in results for v in model_votes]
    passed = {name: ok for name, (_, ok) in zip(backends, results, strict=True)}
    return build_verdict(votes, passed, n_steps=len(req.steps), rule=req.policy.label_rule)
