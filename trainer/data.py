"""A group -> the exact planner input of its G plans, tokenized once.

The prompt is laid out by :func:`coda.prompts.planner.build_planner_messages` (the builder the
planner service uses) from the group's stored state, screenshots read from the artifact store
as the service reads them (bytes -> data URL), and tokenized by
:func:`coda.inference.encoding.build_model_inputs` (the service's encoding, images
bounded by the same ``max_pixels``). So the trainer scores exactly the tokens the service
generated from. The plan tokens are the sampler's token ids when the candidate carries them,
else the plan text re-tokenized plus the end-of-turn token the model stopped on.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from coda.contracts.history import ImageRef
from coda.contracts.training import Candidate, Group, StateRef
from coda.imagerefs import ImageRefError, decode_b64, read_ref
from coda.inference.encoding import DEFAULT_MAX_PIXELS, build_model_inputs
from coda.inference.images import encode_data_url
from coda.prompts.planner import PastStep, build_planner_messages

ScreenshotReader = Callable[[str], bytes]
"""artifact key -> image bytes"""


class GroupDataError(ValueError):
    """A group that cannot be turned into model inputs (missing screenshot, bad log-probs)."""


def artifact_reader(artifacts_url: str) -> ScreenshotReader:
    """Reads screenshot keys from the artifact store at ``artifacts_url`` (as the services do)."""

    def read(key: str) -> bytes:
        try:
            return read_ref(key, artifacts_url)
        except Exception as exc:
            raise GroupDataError(f"screenshot {key!r}: {exc}") from exc

    return read


@dataclass(frozen=True)
class PromptOptions:
    """How the planner service lays out its prompt (must match its settings)."""

    max_turns: int = 15
    keep_images: int = 1
    answer_mode: bool = False
    max_pixels: int | None = None


def planner_messages(state: StateRef, read: ScreenshotReader,
                     options: PromptOptions = PromptOptions()) -> list[dict[str, Any]]:
    """The OpenAI-format planner conversation of a stored state (as ``POST /v1/plan`` builds it).

    ``state.history`` holds the past steps as the planner request carried them: the
    planner's own text of each step and its screenshot (an artifact key, or inline).
    """
    history = list(state.history)[-options.max_turns:] if options.max_turns else []
    first_kept = len(history) - min(options.keep_images, len(history))
    steps = []
    for i, item in enumerate(history):
        shot = item.screenshot
        url = encode_data_url(_image_bytes(shot, read, i)) \
            if shot is not None and i >= first_kept else None
        steps.append(PastStep(item.thought, url))
    previous = None
    if state.previous_screenshot is not None and options.keep_images > 0 and history:
        previous = encode_data_url(read(state.previous_screenshot))
    return build_planner_messages(
        state.instruction, steps, encode_data_url(read(state.screenshot)), previous,
        answer_mode=options.answer_mode, max_turns=options.max_turns,
        keep_images=options.keep_images)


def _image_bytes(image: ImageRef, read: ScreenshotReader, i: int) -> bytes:
    """The bytes of a history step's screenshot: read from the store, or decoded inline."""
    if image.ref is not None:
        return read(image.ref)
    try:
        return decode_b64(image.b64 or "", ("state", "history", i, "screenshot", "b64"))
    except ImageRefError as exc:
        raise GroupDataError(f"state.history[{i}].screenshot: {exc}") from exc


def plan_token_ids(tokenizer: Any, candidate: Candidate, eos_id: int) -> list[int]:
    """The plan's tokens as the model produced them (ids from the sampler when given)."""
    if candidate.token_ids is not None:
        return list(candidate.token_ids)
    ids = tokenizer(candidate.plan, add_special_tokens=False)["input_ids"]
    return [*ids, eos_id]


@dataclass
class EncodedGroup:
    """One group ready for the model: its prompt once, its G plans as token ids."""

    prompt: dict[str, torch.Tensor]
    """``input_ids`` / ``attention_mask`` ``[1, P]``, ``mm_token_type_ids``, ``pixel_values``
    and ``image_grid_thw`` as the processor returns them for the single prompt."""
    completions: list[list[int]]
    rewards: list[float]
    sampler_logprobs: list[list[float] | None]
    group_id: uuid.UUID | None = None
    version: str | None = None
    behind: int = 0
    """How many versions the sampling policy is behind the one the planners serve (set by the
    loop): above 0 the ratio's logp_old is the sampler's log-probs (:mod:`trainer.grpo.update`)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def lengths(self) -> list[int]:
        return [len(c) for c in self.completions]

    @property
    def prompt_len(self) -> int:
        return int(self.prompt["input_ids"].shape[1])

    def mask(self) -> torch.Tensor:
        """``[G, Lmax]``: 1 on plan tokens, 0 on padding."""
        width = max(self.lengths)
        return torch.tensor([[1.0] * n + [0.0] * (width - n) for n in self.lengths])

    def padded_sampler_logprobs(self) -> torch.Tensor | None:
        """``[G, Lmax]`` of the sampler's log-probabilities, or None unless every plan has them."""
        if any(lp is None for lp in self.sampler_logprobs):
            return None
        width = max(self.lengths)
        rows = [list(lp or []) + [0.0] * (width - len(lp or [])) for lp in self.sampler_logprobs]
        return torch.tensor(rows)


def vision_placeholder_ids(processor: Any) -> set[int]:
    """Token ids the model treats as image/video slots (a plan must not contain them)."""
    ids = set()
    for attr in ("image_token", "video_token"):
        token = getattr(processor, attr, None)
        if isinstance(token, str):
            value = processor.tokenizer.convert_tokens_to_ids(token)
            if isinstance(value, int):
                ids.add(value)
    return ids


def group_version(group: Group) -> str | None:
    """The planner version that sampled the group (the group's, else its first plan's)."""
    if group.planner_version is not None:
        return group.planner_version
    return next((c.planner_version for c in group.candidates if c.planner_version), None)


def encode_group(processor: Any, group: Group, read: ScreenshotReader,
                 options: PromptOptions = PromptOptions(),
                 group_id: uuid.UUID | None = None) -> EncodedGroup:
    """Tokenize a group's prompt once and its plans; checks the sampler log-probs' lengths."""
    messages = planner_messages(group.state, read, options)
    max_pixels = options.max_pixels if options.max_pixels is not None else DEFAULT_MAX_PIXELS
    inputs = build_model_inputs(processor, [messages], max_pixels=max_pixels)
    tokenizer = processor.tokenizer
    eos_id = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    completions = [plan_token_ids(tokenizer, c, eos_id) for c in group.candidates]
    placeholders = vision_placeholder_ids(processor)
    for i, ids in enumerate(completions):
        if placeholders.intersection(ids):
            raise GroupDataError(f"candidates[{i}]: the plan contains image/video placeholder "
                                 "tokens, which cannot be scored as text")
    sampler: list[list[float] | None] = []
    for i, (cand, ids) in enumerate(zip(group.candidates, completions, strict=True)):
        if not ids:
            raise GroupDataError(f"candidates[{i}]: empty plan")
        if cand.logprobs is not None and len(cand.logprobs) != len(ids):
            raise GroupDataError(f"candidates[{i}].logprobs: {len(cand.logprobs)} values for "
                                 f"{len(ids)} plan tokens")
        sampler.append(list(cand.logprobs) if cand.logprobs is not None else None)
    prompt = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    return EncodedGroup(prompt=prompt, completions=completions,
                        rewards=[c.reward for c in group.candidates], sampler_logprobs=sampler,
                        group_id=group_id, version=group_version(group))


def total_lengths(groups: Sequence[EncodedGroup]) -> list[int]:
    """Plan lengths of a batch of groups, in order (what the loss denominator needs)."""
    return [n for g in groups for n in g.lengths]
