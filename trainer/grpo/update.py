"""One GRPO update over a batch of encoded groups: forward, loss, backward, optimizer step.

The batch is split over processes (``rank::world``) and, inside a process, into micro-steps of
``groups_per_micro_step`` groups (gradient accumulation). Every piece divides its loss
numerator by the denominator of the WHOLE batch (:mod:`trainer.grpo.losses`), and data-parallel
gradient averaging is undone by multiplying by the world size, so the update equals the one a
single process computes on the whole batch. Processes with fewer groups run zero-weighted
micro-steps so all of them take part in the same number of gradient reductions.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from trainer.data import EncodedGroup, total_lengths
from trainer.grpo.losses import aggregate_denominator, aggregate_sum, group_advantages, token_loss
from trainer.logprobs import move_group, plan_logprobs


@dataclass(frozen=True)
class LossSettings:
    """The parts of :class:`~trainer.config.TrainerConfig` the loss needs."""

    eps_low: float = 0.2
    eps_high: float = 0.2
    beta: float = 0.0
    scale_std: bool = True
    adv_eps: float = 1e-4
    aggregation: str = "token_mean"
    norm_len: int | None = None
    tis_cap: float | None = 2.0
    epochs: int = 1
    shared_prompt: bool = True
    groups_per_micro_step: int = 1
    temperature: float = 1.0


@dataclass
class Accumulator:
    """Sums over the plan tokens a process saw; reduced across processes at the end."""

    sums: dict[str, float] = field(default_factory=dict)
    maxes: dict[str, float] = field(default_factory=dict)
    mins: dict[str, float] = field(default_factory=dict)

    def add(self, key: str, value: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value

    def peak(self, key: str, value: float) -> None:
        self.maxes[key] = max(self.maxes.get(key, -math.inf), value)

    def low(self, key: str, value: float) -> None:
        self.mins[key] = min(self.mins.get(key, math.inf), value)


@dataclass(frozen=True)
class Parallel:
    """How this process takes part: its rank, the world size, and the hooks of accelerate."""

    rank: int = 0
    world: int = 1
    backward: Callable[[Tensor], None] = lambda loss: loss.backward()
    no_sync: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    clip_grad: Callable[[float], float] | None = None
    all_reduce: Callable[[Tensor, str], Tensor] | None = None
    """``all_reduce(tensor, op)`` with op ``sum`` / ``max`` / ``min``; None in one process."""


@contextlib.contextmanager
def _adapter_disabled(model: Any) -> Iterator[None]:
    inner = getattr(model, "module", model)  # DDP
    disable = getattr(inner, "disable_adapter", None)
    if disable is None:
        raise ValueError("beta > 0 without LoRA needs a reference model")
    with disable():
        yield


def reference_logprobs(model: Any, group: EncodedGroup, shared: bool,
                       ref_model: Any | None = None, temperature: float = 1.0) -> Tensor:
    """Log-probs under the reference policy: the base model with the adapter disabled (LoRA)
    or a separate frozen copy (full fine-tuning)."""
    with torch.no_grad():
        if ref_model is not None:
            return plan_logprobs(ref_model, group, shared=shared, temperature=temperature)
        with _adapter_disabled(model):
            return plan_logprobs(model, group, shared=shared, temperature=temperature)


def _micro_batches(groups: list[EncodedGroup], size: int, rank: int,
                   world: int) -> tuple[list[list[EncodedGroup]], int]:
    """This process's micro-batches and how many every process runs (the longest shard's)."""
    mine = groups[rank::world]
    longest = math.ceil(len(groups) / world)
    steps = math.ceil(longest / size)
    batches = [mine[i * size:(i + 1) * size] for i in range(steps)]
    return batches, steps


def old_and_weights(group: EncodedGroup, logp: Tensor, old: Tensor | None, mask: Tensor,
                     s: LossSettings) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """logp_old of the ratio, the truncated importance weights (or None), and the sampler's
    log-probs (or None when a plan lacks them).

    A group sampled by an older version (``group.behind > 0``) is off-policy: its ratio is taken
    against the policy that sampled it, logp_old = the sampler's log-probs (the GRPO/PPO
    definition, ``rho = pi_theta / pi_old`` with pi_old the sampling policy), so the clip bounds
    the step from that policy and no further weight applies (it would be exp(0) = 1). A group of
    the served version is on-policy up to the trainer/sampler numerics: logp_old is the
    trainer's own (``logp.detach()``, or the pre-update pass with several epochs), and the
    sampler's log-probs enter only through the truncated importance weight
    ``min(exp(logp_old - logp_sampler), tis_cap)`` that corrects the mismatch."""
    sampler = group.padded_sampler_logprobs()
    if sampler is not None:
        sampler = sampler.to(logp.device)
    if group.behind > 0 and sampler is not None:
        return sampler, None, sampler
    old_logp = old.to(logp.device) if old is not None else logp.detach()
    weights = None
    if sampler is not None and s.tis_cap is not None:
        weights = torch.exp(old_logp - sampler).clamp(max=s.tis_cap) * mask
    return old_logp, weights, sampler


def _group_loss(model: Any, group: EncodedGroup, s: LossSettings, denominator: float,
                old: Tensor | None, ref_model: Any | None, acc: Accumulator,
                record: bool) -> Tensor:
    device = next(p for p in model.parameters()).device
    group = move_group(group, device)
    mask = group.mask().to(device)
    logp = plan_logprobs(model, group, shared=s.shared_prompt, temperature=s.temperature)
    old_logp, weights, sampler = old_and_weights(group, logp, old, mask, s)
    rewards = torch.tensor(group.rewards, device=device)
    adv = group_advantages(rewards, scale_std=s.scale_std, eps=s.adv_eps)
    ref = None
    if s.beta > 0:
        ref = reference_logprobs(model, group, s.shared_prompt, ref_model, s.temperature)
    terms = token_loss(logp, old_logp, adv, mask, eps_low=s.eps_low, eps_high=s.eps_high,
                       beta=s.beta, ref_logp=ref, is_weights=weights)
    numerator = aggregate_sum(terms.loss, mask, s.aggregation)
    if record:
        tokens = float(mask.sum())
        acc.add("tokens", tokens)
        acc.add("plans", float(len(group.completions)))
        acc.add("groups", 1.0)
        acc.add("loss", float(numerator.detach()) / denominator)
        acc.add("clipped", float(terms.clipped.detach().sum()))
        acc.add("ratio", float(terms.ratio.detach().sum()))
        acc.add("reward", float(rewards.sum()))
        acc.add("reward_sq", float((rewards ** 2).sum()))
        acc.add("adv_abs", float(adv.abs().sum()))
        if sampler is None:  # no importance correction and no off-policy ratio: counted
            acc.add("sampler_missing", 1.0)
        elif group.behind > 0:
            acc.add("off_policy", 1.0)
        if terms.kl is not None:
            acc.add("kl", float(terms.kl.detach().sum()))
            acc.add("kl_tokens", tokens)
        if weights is not None and sampler is not None and s.tis_cap is not None:
            raw = torch.exp(old_logp - sampler)[mask.bool()]
            acc.add("is_tokens", tokens)
            acc.add("is_weight", float(weights.sum()))
            acc.add("is_truncated", float((raw > s.tis_cap).sum()))
            acc.peak("is_weight_max", float(raw.max()))
            acc.low("is_weight_min", float(raw.min()))
    return numerator / denominator


def old_logprobs(model: Any, groups: list[EncodedGroup], s: LossSettings) -> list[Tensor]:
    """logp_old of every group before the first pass (only needed with several epochs)."""
    device = next(p for p in model.parameters()).device
    with torch.no_grad():
        return [plan_logprobs(model, move_group(g, device), shared=s.shared_prompt,
                              temperature=s.temperature).detach()
                for g in groups]


_ALL_KEYS = ("adv_abs", "clipped", "groups", "is_tokens", "is_truncated", "is_weight", "kl",
             "kl_tokens", "loss", "off_policy", "plans", "ratio", "reward", "reward_sq",
             "sampler_missing", "tokens")


def _reduce(acc: Accumulator, par: Parallel) -> Accumulator:
    if par.all_reduce is None or par.world == 1:
        return acc
    keys = list(_ALL_KEYS)  # the same order in every process
    sums = par.all_reduce(torch.tensor([acc.sums.get(k, 0.0) for k in keys],
                                       dtype=torch.float64), "sum")
    out = Accumulator(dict(zip(keys, sums.tolist(), strict=True)))
    for name, src, op, default in (("maxes", acc.maxes, "max", -math.inf),
                                   ("mins", acc.mins, "min", math.inf)):
        for k in ("is_weight_max",) if name == "maxes" else ("is_weight_min",):
            val = par.all_reduce(torch.tensor([src.get(k, default)], dtype=torch.float64), op)
            if math.isfinite(float(val[0])):
                getattr(out, name)[k] = float(val[0])
    return out



def train_step(model: Any, optimizer: torch.optim.Optimizer, groups: list[EncodedGroup],
               s: LossSettings, par: Parallel = Parallel(), ref_model: Any | None = None,
               max_grad_norm: float | None = None, *, step: bool = True) -> dict[str, float]:
    """One update on ``groups`` (the whole batch, identical in every process). Returns the
    update's metrics (reduced over processes). ``step=False`` only measures (the ``zero``
    control): one pass without gradients, no backward, no optimizer step, so every parameter
    and the optimizer's state stay exactly as they were."""
    if not step:
        return measure_step(model, groups, s, par, ref_model)
    start = time.perf_counter()
    denominator = aggregate_denominator(total_lengths(groups), s.aggregation, s.norm_len)
    batches, steps = _micro_batches(groups, s.groups_per_micro_step, par.rank, par.world)
    mine = [g for b in batches for g in b]
    olds = old_logprobs(model, mine, s) if s.epochs > 1 else None
    old_of = {id(g): olds[i] for i, g in enumerate(mine)} if olds is not None else {}
    acc = Accumulator()
    grad_norm = 0.0
    model.train()
    for epoch in range(s.epochs):
        for k, micro in enumerate(batches):
            last = k == steps - 1
            ctx = contextlib.nullcontext() if last else par.no_sync()
            with ctx:
                if micro:
                    loss = sum(_group_loss(model, g, s, denominator, old_of.get(id(g)),
                                           ref_model, acc, record=epoch == 0) for g in micro)
                else:  # this shard ran out: take part in the reduction with a zero gradient
                    loss = 0.0 * _group_loss(model, mine[0] if mine else groups[0], s,
                                             denominator, None, ref_model, acc, record=False)
                assert isinstance(loss, Tensor)
                par.backward(loss * par.world)
        if max_grad_norm is not None:
            if par.clip_grad is not None:
                grad_norm = float(par.clip_grad(max_grad_norm))
            else:
                params = [p for p in model.parameters() if p.requires_grad]
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    total = _reduce(acc, par)
    elapsed = time.perf_counter() - start
    return {**summarize(total, elapsed, grad_norm), "optimizer_step": 1.0}


def measure_step(model: Any, groups: list[EncodedGroup], s: LossSettings,
                 par: Parallel = Parallel(), ref_model: Any | None = None) -> dict[str, float]:
    """The figures of an update on ``groups`` (loss, rewards, importance weights, ...) without
    taking it: forward passes under ``torch.no_grad`` in eval mode (no dropout, no state of any
    layer changes), no backward, no optimizer step. ``optimizer_step`` is 0 in the figures."""
    start = time.perf_counter()
    denominator = aggregate_denominator(total_lengths(groups), s.aggregation, s.norm_len)
    batches, _ = _micro_batches(groups, s.groups_per_micro_step, par.rank, par.world)
    acc = Accumulator()
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for micro in batches:
                for g in micro:
                    _group_loss(model, g, s, denominator, None, ref_model, acc, record=True)
    finally:
        model.train(was_training)
    total = _reduce(acc, par)
    return {**summarize(total, time.perf_counter() - start, 0.0), "optimizer_step": 0.0}


def summarize(acc: Accumulator, elapsed: float, grad_norm: float) -> dict[str, float]:
    """The update's metrics (names as on the status page)."""
    g = acc.sums
    plans = max(1.0, g.get("plans", 0.0))
    tokens = max(1.0, g.get("tokens", 0.0))
    mean = g.get("reward", 0.0) / plans
    var = max(0.0, g.get("reward_sq", 0.0) / plans - mean ** 2)
    out = {
        "loss": g.get("loss", 0.0),
        "reward_mean": mean,
        "reward_std": math.sqrt(var),
        "clip_fraction": g.get("clipped", 0.0) / tokens,
        "ratio_mean": g.get("ratio", 0.0) / tokens,
        "grad_norm": grad_norm,
        "groups": g.get("groups", 0.0),
        "plans": g.get("plans", 0.0),
        "tokens": g.get("tokens", 0.0),
        "tokens_per_s": g.get("tokens", 0.0) / elapsed if elapsed > 0 else 0.0,
        "groups_per_s": g.get("groups", 0.0) / elapsed if elapsed > 0 else 0.0,
        "update_s": elapsed,
        "off_policy_groups": g.get("off_policy", 0.0),
        "sampler_logprobs_missing": g.get("sampler_missing", 0.0),
    }
    if g.get("kl_tokens"):
        out["kl"] = g["kl"] / g["kl_tokens"]
    if g.get("is_tokens"):
        out["is_weight_mean"] = g["is_weight"] / g["is_tokens"]
        out["is_truncated_fraction"] = g["is_truncated"] / g["is_tokens"]
        if "is_weight_max" in acc.maxes:
            out["is_weight_max"] = acc.maxes["is_weight_max"]
        if "is_weight_min" in acc.mins:
            out["is_weight_min"] = acc.mins["is_weight_min"]
    return out
