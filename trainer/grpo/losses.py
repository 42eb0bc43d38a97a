"""Decoupled-GRPO algorithm core as pure tensor functions (no model, no I/O).

Formulas (``reference/grpo.md``; TRL ``GRPOTrainer``, verl ``core_algos.py``):

* advantages: ``A_i = (r_i - mean_g) / (std_g + eps)`` over the G plans of one group, or
  ``r_i - mean_g`` without std scaling (Dr. GRPO); a group whose rewards are all equal carries
  no signal (:func:`has_signal`).
* per plan token: ``rho = exp(logp - logp_old)``,
  ``surrogate = min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)``,
  ``loss_t = -w_t * surrogate + beta * KL_t`` with the k3 estimator
  ``KL_t = exp(ref - logp) - (ref - logp) - 1``.
* ``w_t`` is the truncated importance weight that corrects for the rollout policy lagging the
  trained one: ``w_t = min(exp(logp_old - logp_sampler), cap)`` (truncated importance sampling,
  Yao et al. 2025, as verl's ``tis_imp_ratio_cap``); ``w_t = 1`` when the sampler's
  log-probabilities are unknown. It is a constant (no gradient).
* aggregation over the batch: ``token_mean`` (sum over all plan tokens / their count; TRL
  "dapo", verl default), ``seq_mean`` (mean over a plan's tokens, then over plans; original
  GRPO), ``dr_grpo`` (sum / (plans * norm_len); Dr. GRPO).

Aggregation is split in a numerator (:func:`aggregate_sum`) and a denominator
(:func:`aggregate_denominator`) so that a batch spread over gradient-accumulation steps or
processes gives exactly the loss of the whole batch: every piece divides its numerator by the
denominator of the WHOLE batch, which is known before any forward pass (it only needs the plan
lengths).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

from trainer.config import Aggregation, RewardControl


def has_signal(rewards: Tensor, tol: float = 1e-8) -> bool:
    """Whether a group's rewards differ (all-equal groups give zero advantages: skip them)."""
    return bool((rewards.max() - rewards.min()).abs() > tol)


def derangement(n: int, seed: str | int) -> list[int]:
    """A permutation of ``range(n)`` with no fixed point (``n >= 2``), seeded by ``seed``
    (pure): plan ``i`` gets plan ``perm[i]``'s reward, never its own. A uniformly random cycle
    order rotated by a random shift in ``1..n-1``, so ``perm[i]`` is uniform over the other
    ``n - 1`` plans."""
    if n < 2:
        raise ValueError("a derangement needs at least two elements")
    rng = random.Random(str(seed))
    order = list(range(n))
    shift = rng.randrange(1, n)  # a rotation after a shuffle: every plan moves
    rng.shuffle(order)
    moved = [0] * n
    for i, j in enumerate(order):
        moved[j] = order[(i + shift) % n]
    return moved


def uniform_permutation(n: int, seed: str | int) -> list[int]:
    """A uniformly random permutation of ``range(n)`` seeded by ``seed`` (pure; Fisher-Yates):
    a plan keeps its own reward with probability ``1/n``."""
    rng = random.Random(str(seed))
    order = list(range(n))
    rng.shuffle(order)
    return order


def controlled_rewards(rewards: list[float], control: RewardControl | str,
                       seed: str | int) -> list[float]:
    """The rewards a control run gives the plans of one group (pure; ``seed`` is e.g. the
    group's id). ``none`` and ``zero`` leave them as they are (``zero`` takes no optimizer step
    at all: :class:`trainer.grpo.loop.Trainer`); ``derangement`` (old name ``shuffle``) gives
    every plan another plan's reward (:func:`derangement`), so in expectation a plan's advantage
    is ``-1/(G-1)`` of its own: an ANTI-learning control; ``uniform`` permutes them uniformly
    (:func:`uniform_permutation`; expected advantage zero: a null)."""
    control = RewardControl(control)
    if control in (RewardControl.NONE, RewardControl.ZERO) or len(rewards) < 2:
        return list(rewards)
    if control is RewardControl.DERANGEMENT:
        perm = derangement(len(rewards), seed)
    else:
        perm = uniform_permutation(len(rewards), seed)
    return [rewards[perm[i]] for i in range(len(rewards))]


def group_advantages(rewards: Tensor, *, scale_std: bool = True, eps: float = 1e-4) -> Tensor:
    """Group-normalised advantages of one group's rewards ``[G]`` (population std, as TRL)."""
    centred = rewards - rewards.mean()
    if not scale_std:
        return centred
    return centred / (rewards.std(unbiased=False) + eps)


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(pi_theta || pi_ref): ``exp(d) - d - 1``, ``d = ref - logp``."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def truncated_is_weights(old_logp: Tensor, sampler_logp: Tensor, cap: float) -> Tensor:
    """``min(pi_old / pi_sampler, cap)`` per token, detached (truncated importance sampling)."""
    return torch.exp(old_logp.detach() - sampler_logp).clamp(max=cap).detach()


@dataclass(frozen=True)
class TokenLoss:
    """Per-token loss ``[B, T]`` and what the metrics need (all zero where ``mask`` is 0)."""

    loss: Tensor
    clipped: Tensor
    """1 where the clipped branch of the surrogate was taken (it differs from the plain one)."""
    kl: Tensor | None
    ratio: Tensor


def token_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    beta: float = 0.0,
    ref_logp: Tensor | None = None,
    is_weights: Tensor | None = None,
) -> TokenLoss:
    """The clipped, importance-corrected, KL-regularised loss of every plan token.

    ``logp``, ``old_logp``, ``ref_logp``, ``is_weights`` and ``mask`` are ``[B, T]``;
    ``advantages`` is ``[B]`` (one per plan). Padding positions (mask 0) get loss 0.
    """
    if beta != 0 and ref_logp is None:
        raise ValueError("ref_logp: required when beta != 0")
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(-1)
    ratio = torch.exp(logp - old_logp.detach())
    plain = ratio * adv
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    clipped = clipped_ratio * adv
    surrogate = torch.minimum(plain, clipped)
    pg = -surrogate
    if is_weights is not None:
        pg = pg * is_weights.detach()
    kl = None
    loss = pg
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp.detach())
        if beta != 0:
            loss = loss + beta * kl
        kl = kl * mask
    took_clip = (clipped < plain).to(logp.dtype) * mask
    return TokenLoss(loss=loss * mask, clipped=took_clip, kl=kl, ratio=ratio * mask)


def aggregate_sum(loss: Tensor, mask: Tensor, mode: Aggregation | str) -> Tensor:
    """The numerator of the aggregated loss for this piece of the batch (see module doc)."""
    mode = Aggregation(mode)
    mask = mask.to(loss.dtype)
    if mode is Aggregation.SEQ_MEAN:
        per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.sum()
    return (loss * mask).sum()


def aggregate_denominator(lengths: list[int], mode: Aggregation | str,
                          norm_len: int | None = None) -> float:
    """The denominator of the aggregated loss for a WHOLE batch of plans of ``lengths`` tokens.

    ``norm_len`` (Dr. GRPO's constant) defaults to the longest plan of the batch.
    """
    mode = Aggregation(mode)
    if not lengths:
        raise ValueError("lengths: empty batch")
    if mode is Aggregation.TOKEN_MEAN:
        return float(max(1, sum(lengths)))
    if mode is Aggregation.SEQ_MEAN:
        return float(len(lengths))
    return float(len(lengths) * (norm_len if norm_len is not None else max(lengths)))


def aggregate(loss: Tensor, mask: Tensor, mode: Aggregation | str,
              norm_len: int | None = None) -> Tensor:
    """Aggregate a per-token loss ``[B, T]`` of one whole batch to a scalar."""
    lengths = [int(n) for n in mask.sum(-1).tolist()]
    return aggregate_sum(loss, mask, mode) / aggregate_denominator(lengths, mode, norm_len)
