"""The GRPO loss and its gradients against an independent scalar reference (plain Python math,
one token at a time, gradients derived by hand) on fixed tensors: clipping in both directions,
k3 KL, truncated importance weights and every aggregation."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.config import Aggregation
from trainer.grpo.losses import (
    aggregate,
    aggregate_denominator,
    aggregate_sum,
    group_advantages,
    has_signal,
    k3_kl,
    token_loss,
    truncated_is_weights,
)

# three plans of up to 4 tokens; plan 2 has 2 tokens, plan 1 has 3
LOGP = [[-1.0, -0.5, -2.0, -0.1], [-0.3, -1.2, -0.7, 0.0], [-2.5, -0.05, 0.0, 0.0]]
OLD = [[-1.4, -0.5, -1.6, -0.4], [-0.1, -1.6, -0.2, 0.0], [-2.0, -0.4, 0.0, 0.0]]
REF = [[-1.1, -0.7, -1.9, -0.3], [-0.2, -1.0, -0.9, 0.0], [-2.2, -0.2, 0.0, 0.0]]
SAMPLER = [[-1.2, -1.9, -1.5, -0.2], [-0.5, -1.0, -0.3, 0.0], [-3.5, -0.3, 0.0, 0.0]]
MASK = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
ADV = [1.3, -0.8, -0.5]
EPS_LOW, EPS_HIGH, BETA, CAP = 0.2, 0.28, 0.04, 2.0


def reference(aggregation: str, *, beta: float, use_is: bool, use_ref: bool,
              norm_len: int | None = None) -> tuple[float, list[list[float]]]:
    """Loss and d loss / d logp, token by token."""
    per_token: list[list[float]] = []
    grads: list[list[float]] = []
    for i, row in enumerate(LOGP):
        losses, g = [], []
        for t, lp in enumerate(row):
            if not MASK[i][t]:
                losses.append(0.0)
                g.append(0.0)
                continue
            a = ADV[i]
            rho = math.exp(lp - OLD[i][t])
            clipped_rho = min(max(rho, 1 - EPS_LOW), 1 + EPS_HIGH)
            plain, clip = rho * a, clipped_rho * a
            w = min(math.exp(OLD[i][t] - SAMPLER[i][t]), CAP) if use_is else 1.0
            loss = -w * min(plain, clip)
            # d(-w * surrogate)/d lp: the plain branch moves with rho; a clamped rho does not
            grad = -w * a * rho if plain <= clip or 1 - EPS_LOW < rho < 1 + EPS_HIGH else 0.0
            if use_ref:
                d = REF[i][t] - lp
                loss += beta * (math.exp(d) - d - 1)
                grad += beta * (1 - math.exp(d))
            losses.append(loss)
            g.append(grad)
        per_token.append(losses)
        grads.append(g)
    lengths = [sum(m) for m in MASK]
    if aggregation == "token_mean":
        scale = [1 / sum(lengths)] * 3
    elif aggregation == "seq_mean":
        scale = [1 / (3 * n) for n in lengths]
    else:
        scale = [1 / (3 * (norm_len or max(lengths)))] * 3
    total = sum(s * sum(row) for s, row in zip(scale, per_token, strict=True))
    return total, [[s * x for x in row] for s, row in zip(scale, grads, strict=True)]


CASES = [(agg, beta, use_is, use_ref) for agg in ("token_mean", "seq_mean", "dr_grpo")
         for beta, use_is, use_ref in ((0.0, False, False), (BETA, False, True),
                                       (0.0, True, False), (BETA, True, True))]


@pytest.mark.parametrize(("aggregation", "beta", "use_is", "use_ref"), CASES)
def test_loss_and_gradient_match_the_scalar_reference(aggregation: str, beta: float,
                                                      use_is: bool, use_ref: bool) -> None:
    logp = torch.tensor(LOGP, dtype=torch.float64, requires_grad=True)
    old = torch.tensor(OLD, dtype=torch.float64)
    mask = torch.tensor(MASK, dtype=torch.float64)
    weights = truncated_is_weights(old, torch.tensor(SAMPLER, dtype=torch.float64), CAP) \
        if use_is else None
    terms = token_loss(logp, old, torch.tensor(ADV, dtype=torch.float64), mask,
                       eps_low=EPS_LOW, eps_high=EPS_HIGH, beta=beta,
                       ref_logp=torch.tensor(REF, dtype=torch.float64) if use_ref else None,
                       is_weights=weights)
    loss = aggregate(terms.loss, mask, aggregation)
    loss.backward()
    want_loss, want_grad = reference(aggregation, beta=beta, use_is=use_is, use_ref=use_ref)
    assert float(loss.detach()) == pytest.approx(want_loss, rel=1e-12, abs=1e-12)
    assert logp.grad is not None
    assert logp.grad.tolist() == [pytest.approx(row, rel=1e-9, abs=1e-12) for row in want_grad]


def test_the_fixture_exercises_both_clips_and_the_truncation() -> None:
    """The fixed tensors hit every branch the reference distinguishes."""
    rhos = [(math.exp(lp - o), ADV[i]) for i, row in enumerate(LOGP)
            for lp, o, m in zip(row, OLD[i], MASK[i], strict=True) if m]
    assert any(r > 1 + EPS_HIGH and a > 0 for r, a in rhos)  # upper clip active
    assert any(r < 1 - EPS_LOW and a < 0 for r, a in rhos)  # lower clip active
    assert any(r > 1 + EPS_HIGH and a < 0 for r, a in rhos)  # clip inactive (min picks plain)
    weights = [math.exp(o - s) for row_o, row_s, row_m in zip(OLD, SAMPLER, MASK, strict=True)
               for o, s, m in zip(row_o, row_s, row_m, strict=True) if m]
    assert any(w > CAP for w in weights) and any(w < 1 for w in weights)


def test_clip_fraction_counts_the_tokens_whose_clipped_branch_was_taken() -> None:
    logp, old = torch.tensor(LOGP), torch.tensor(OLD)
    terms = token_loss(logp, old, torch.tensor(ADV), torch.tensor(MASK, dtype=torch.float32),
                       eps_low=EPS_LOW, eps_high=EPS_HIGH)
    expected = 0
    for i, row in enumerate(LOGP):
        for t, lp in enumerate(row):
            if MASK[i][t]:
                rho = math.exp(lp - OLD[i][t])
                expected += (rho > 1 + EPS_HIGH and ADV[i] > 0) or (rho < 1 - EPS_LOW
                                                                     and ADV[i] < 0)
    assert int(terms.clipped.sum()) == expected > 0


def test_one_pass_means_ratio_one_and_gradient_advantage_times_grad_logp() -> None:
    logp = torch.tensor(LOGP, requires_grad=True)
    mask = torch.tensor(MASK, dtype=torch.float32)
    terms = token_loss(logp, logp.detach(), torch.tensor(ADV), mask)
    aggregate(terms.loss, mask, "token_mean").backward()
    assert logp.grad is not None
    expected = -torch.tensor(ADV).unsqueeze(-1) * mask / mask.sum()
    assert torch.allclose(logp.grad, expected)
    assert int(terms.clipped.sum()) == 0


def test_pieces_of_a_batch_add_up_to_the_whole_batch_loss() -> None:
    """Gradient accumulation / data parallelism: numerators over the whole-batch denominator."""
    loss = torch.tensor(LOGP).abs()
    mask = torch.tensor(MASK, dtype=torch.float32)
    lengths = [int(n) for n in mask.sum(-1)]
    for mode in Aggregation:
        whole = aggregate(loss, mask, mode)
        denominator = aggregate_denominator(lengths, mode)
        pieces = sum(aggregate_sum(loss[i:i + 1], mask[i:i + 1], mode) for i in range(3))
        assert float(pieces / denominator) == pytest.approx(float(whole))


def test_dr_grpo_normalises_by_the_constant_length() -> None:
    loss = torch.ones(3, 4)
    mask = torch.tensor(MASK, dtype=torch.float32)
    assert float(aggregate(loss, mask, "dr_grpo", norm_len=10)) == pytest.approx(9 / 30)
    assert float(aggregate(loss, mask, "dr_grpo")) == pytest.approx(9 / 12)
    assert float(aggregate(loss, mask, "token_mean")) == pytest.approx(1.0)
    assert float(aggregate(loss, mask, "seq_mean")) == pytest.approx(1.0)


def test_group_advantages() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    mean, std = 0.5, math.sqrt(sum((r - 0.5) ** 2 for r in (1.0, 0.0, 0.5, 0.5)) / 4)
    adv = group_advantages(rewards, eps=1e-4)
    assert adv.tolist() == pytest.approx([(r - mean) / (std + 1e-4) for r in (1, 0, 0.5, 0.5)])
    assert group_advantages(rewards, scale_std=False).tolist() == [0.5, -0.5, 0.0, 0.0]
    assert has_signal(rewards)
    assert not has_signal(torch.tensor([0.3, 0.3, 0.3]))


def test_k3_kl_is_zero_at_the_reference_and_positive_elsewhere() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5])
    assert torch.allclose(k3_kl(logp, logp), torch.zeros(3))
    assert bool((k3_kl(logp, logp + torch.tensor([0.3, -0.4, 0.1])) > 0).all())


def test_kl_needs_a_reference() -> None:
    with pytest.raises(ValueError, match="ref_logp"):
        token_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1),
                   beta=0.1)
