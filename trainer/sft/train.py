"""Stage 2: supervised fine-tuning of a generalist planner on exported planner turns.

A plain loop, not TRL's ``SFTTrainer``: the planner must see exactly the service's input —
the CODA prompt from ``coda.prompts.planner``, images bounded by the service's ``max_pixels``
and encoded by ``coda.inference.encoding.build_model_inputs`` — and the loss must
cover only the planner's final turn. ``SFTTrainer`` renders conversations with its own
vision collator, and restricting its loss to assistant tokens (``assistant_only_loss``) needs
a chat template with ``{% generation %}`` markers, which Qwen2.5-VL's template does not have.
Reusing the trainer's encoding (prompt + target tokens in one sequence, logits only where a
target token is predicted, :mod:`trainer.logprobs`) keeps one tokenization for stage 1,
stage 2 and serving, in about sixty lines.

Loss: mean negative log-likelihood over the target tokens of each optimizer step's rows
(token mean). The result is published like a GRPO version (:mod:`trainer.publish`).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from coda.inference.encoding import DEFAULT_MAX_PIXELS, build_model_inputs
from coda.logging import get_logger
from trainer.config import TrainerConfig
from trainer.data import EncodedGroup
from trainer.logprobs import move_group, plan_logprobs
from trainer.policy import load_policy, make_optimizer
from trainer.sft.dataset import row_messages

log = get_logger("trainer.sft")


class SFTConfig(TrainerConfig):
    """The trainer's settings (model, LoRA, prompt layout, master, publishing) plus the SFT
    loop's; environment prefix ``CODA_SFT_``."""

    model_config = SettingsConfigDict(env_prefix="CODA_SFT_", env_file=".env", extra="ignore")

    dataset: str = Field(default="", description="exported dataset: a directory of parquet "
                                                 "files (coda dataset export) or one file")
    epochs: int = Field(default=3, ge=1, description="passes over the dataset")
    rows_per_step: int = Field(default=4, ge=1, description="planner turns per optimizer step "
                                                            "(gradient accumulation)")
    run_name: str = Field(default="sft", pattern=r"^[A-Za-z0-9._-]+$",
                          description="the published version is <run_name>-<epochs>")
    publish: bool = Field(default=True, description="publish the result as a planner version")
    learning_rate: float = Field(default=1e-4, gt=0, description="AdamW learning rate")


@dataclass
class SFTResult:
    losses: list[float] = field(default_factory=list)
    """Mean target-token NLL over the dataset: before training, then after each epoch."""
    steps: int = 0
    version: str | None = None
    uri: str | None = None


def _prompt_key(row: dict[str, Any]) -> str:
    """Rows that show the planner the same input (instruction, past turns, screenshots) share
    one prompt encoding (a warm-up's rows repeat each state once per target)."""
    digest = hashlib.sha256()
    images = [row["screenshot"], *row["history_images"]]
    for part in (row["instruction"], *row["history_texts"]):
        digest.update(part.encode() + b"\0")
    for image in images:
        data = image["bytes"] if isinstance(image, dict) else image.tobytes()
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


@dataclass
class Encoded:
    """The dataset encoded: one prompt per distinct planner input, each row a target of one."""

    prompts: dict[str, dict[str, torch.Tensor]]
    rows: list[tuple[str, list[int]]]
    """(prompt key, target token ids) per row, in the dataset's order."""

    def groups(self, indices: list[int]) -> list[EncodedGroup]:
        """The rows ``indices`` as groups: one per prompt, its rows' targets as the plans."""
        by_key: dict[str, list[list[int]]] = {}
        for i in indices:
            key, target = self.rows[i]
            by_key.setdefault(key, []).append(target)
        return [EncodedGroup(prompt=self.prompts[key], completions=targets,
                             rewards=[0.0] * len(targets), sampler_logprobs=[None] * len(targets))
                for key, targets in by_key.items()]


def encode_rows(processor: Any, rows: list[dict[str, Any]], cfg: SFTConfig) -> Encoded:
    """Each distinct planner input encoded once (the service's prompt and image encoding), each
    row's target as token ids ending with the end-of-turn token."""
    max_pixels = cfg.max_pixels if cfg.max_pixels is not None else DEFAULT_MAX_PIXELS
    tokenizer = processor.tokenizer
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    out = Encoded(prompts={}, rows=[])
    for row in rows:
        key = _prompt_key(row)
        if key not in out.prompts:
            messages = row_messages(row, max_turns=cfg.max_turns, keep_images=cfg.keep_images,
                                    answer_mode=cfg.answer_mode)
            inputs = build_model_inputs(processor, [messages], max_pixels=max_pixels)
            out.prompts[key] = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        target = [*tokenizer(row["target"], add_special_tokens=False)["input_ids"], eos]
        out.rows.append((key, target))
    return out


def group_nll(model: Any, group: EncodedGroup, device: str) -> tuple[torch.Tensor, int]:
    """Summed negative log-likelihood of the group's target tokens, and their count."""
    group = move_group(group, device)
    logp = plan_logprobs(model, group, shared=True)
    mask = group.mask().to(logp.device)
    return -(logp * mask).sum(), sum(group.lengths)


def dataset_loss(model: Any, data: Encoded, device: str) -> float:
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for group in data.groups(list(range(len(data.rows)))):
            nll, n = group_nll(model, group, device)
            total, count = total + float(nll), count + n
    return total / max(1, count)


def train_sft(cfg: SFTConfig, rows: list[dict[str, Any]],
              on_step: Callable[[int, int, float], None] | None = None) -> tuple[SFTResult, Any]:
    """Fine-tune on ``rows``; returns the losses and the policy (for publishing)."""
    if not rows:
        raise ValueError("dataset: no rows to train on")
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg)
    optimizer, scheduler = make_optimizer(policy.model, cfg)
    encoded = encode_rows(policy.processor, rows, cfg)
    result = SFTResult(losses=[dataset_loss(policy.model, encoded, policy.device)])
    order = list(range(len(encoded.rows)))
    rng = random.Random(cfg.seed)
    steps_total = cfg.epochs * math.ceil(len(order) / cfg.rows_per_step)
    for epoch in range(cfg.epochs):
        rng.shuffle(order)
        policy.model.train()
        for start in range(0, len(order), cfg.rows_per_step):
            batch = encoded.groups(order[start:start + cfg.rows_per_step])
            tokens = sum(sum(g.lengths) for g in batch)
            step_loss = 0.0
            for group in batch:  # gradient accumulation, token mean over the step's rows
                nll, _ = group_nll(policy.model, group, policy.device)
                (nll / tokens).backward()
                step_loss += float(nll.detach()) / tokens
            if cfg.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(
                    [p for p in policy.model.parameters() if p.requires_grad], cfg.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            result.steps += 1
            if on_step is not None:
                on_step(result.steps, steps_total, step_loss)
        result.losses.append(dataset_loss(policy.model, encoded, policy.device))
        log.info("sft.epoch", epoch=epoch + 1, loss=round(result.losses[-1], 5))
    return result, policy


async def publish_sft(cfg: SFTConfig, policy: Any, result: SFTResult) -> SFTResult:
    """Write the fine-tuned adapter, register it with the master as the current planner and
    load it into the configured planner services (as GRPO versions are)."""

    from coda.clients.master import MasterClient
    from trainer.publish import register, roll_out, version_spec, write_model_dir

    version = f"{cfg.run_name}-{cfg.epochs:03d}"
    uri = write_model_dir(policy.model.save_pretrained, cfg.adapter_root(), version)
    async with MasterClient(cfg.master_url, token=cfg.master_bearer()) as master:
        await register(master, version_spec(
            version, base_model=cfg.model if cfg.lora else uri,
            adapter_uri=uri if cfg.lora else None, parent=cfg.initial_version,
            metrics={"sft_loss_before": result.losses[0], "sft_loss_after": result.losses[-1],
                     "sft_steps": float(result.steps)}))
    if cfg.lora and cfg.planner_urls:
        await roll_out(cfg.planner_urls, version, cfg.planner_uri(uri, version), keep=[version],
                       run_prefix=f"{cfg.run_name}-", token=cfg.planner_bearer())
    result.version, result.uri = version, uri
    log.info("sft.published", version=version, uri=uri)
    return result
