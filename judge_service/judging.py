"""Judging one trajectory with an ensemble: multi-resolution first pass, then voting@k."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image

from coda.contracts.services_api import JudgePolicy, JudgeRequest
from coda.contracts.training import Verdict, Vote
from coda.inference.base import ChatBackend, GenerateOptions
from coda.prompts.judge import JudgeFrame, build_judge_messages
from judge_service.aggregate import build_verdict, vote_passes, voting_at_k
from judge_service.frames import select_frames
from judge_service.images import high_url, load_image, low_url
from judge_service.parsing import parse_vote
from judge_service.settings import JudgeSettings


@dataclass(frozen=True)
class Conversations:
    """The judge conversation at low resolution (None when not used) and at high resolution."""

    low: list[dict[str, Any]] | None
    high: list[dict[str, Any]]


async def prepare(req: JudgeRequest, settings: JudgeSettings) -> Conversations:
    """Select frames, read them, and build both conversations (images read once)."""
    policy = req.policy
    indices = select_frames(len(req.steps), policy.max_frames)
    images: list[Image.Image] = await asyncio.gather(*(
        load_image(req.steps[i].screenshot, ("steps", i, "screenshot"), settings.artifacts_url)
        for i in indices))

    def frames(urls: Sequence[str]) -> list[JudgeFrame]:
        return [JudgeFrame(step=i + 1, image_url=url, thought=req.steps[i].thought,
                           action=req.steps[i].action)
                for i, url in zip(indices, urls, strict=True)]

    cap = settings.high_max_pixels
    high = await asyncio.to_thread(lambda: [high_url(im, cap) for im in images])
    low = None
    if policy.multi_resolution:
        size = policy.low_resolution
        low_urls = await asyncio.to_thread(lambda: [low_url(im, size) for im in images])
        low = build_judge_messages(req.instruction, frames(low_urls))
    return Conversations(low=low, high=build_judge_messages(req.instruction, frames(high)))


async def judge_with_model(name: str, backend: ChatBackend, conv: Conversations,
                           policy: JudgePolicy, settings: JudgeSettings) -> tuple[list[Vote], bool]:
    """One model's votes and pass/fail: a low-resolution vote first (when enabled); only if
    it passes, ``policy.votes`` high-resolution votes in one call; pass = all votes pass."""
    votes: list[Vote] = []
    if conv.low is not None:
        opts = GenerateOptions(n=1, temperature=policy.temperature, top_p=settings.top_p,
                               max_tokens=settings.max_tokens)
        low = await backend.chat(conv.low, opts)
        votes += [parse_vote(c.text, model=name, resolution="low") for c in low]
        if not all(vote_passes(v) for v in votes) or not votes:
            return votes, False
    opts = GenerateOptions(n=policy.votes, temperature=policy.temperature, top_p=settings.top_p,
                           max_tokens=settings.max_tokens)
    high = [parse_vote(c.text, model=name, resolution="high")
            for c in await backend.chat(conv.high, opts)]
    return votes + high, voting_at_k(high)


async def judge(req: JudgeRequest, backends: Mapping[str, ChatBackend],
                settings: JudgeSettings) -> Verdict:
    """The ensemble verdict over ``backends`` (already narrowed to ``policy.models``)."""
    conv = await prepare(req, settings)
    results = await asyncio.gather(*(
        judge_with_model(name, backend, conv, req.policy, settings)
        for name, backend in backends.items()))
    votes = [v for model_votes, _ in results for v in model_votes]
    passed = {name: ok for name, (_, ok) in zip(backends, results, strict=True)}
    return build_verdict(votes, passed, n_steps=len(req.steps), rule=req.policy.label_rule)
