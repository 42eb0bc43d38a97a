"""Which logp_old the ratio takes (issue 37, point 5): a group of an older version is trained
against the policy that sampled it (its sampler's log-probs); a group of the served version
against the trainer's own log-probs with the truncated importance weight; a group without
sampler log-probs is counted (``sampler_logprobs_missing``), never silently weighted 1."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from trainer.data import EncodedGroup
from trainer.grpo import update
from trainer.grpo.update import LossSettings, measure_step, old_and_weights, train_step

CURRENT = [[-1.0, -2.0], [-0.5, -1.5]]
SAMPLER = [[-1.2, -1.9], [-0.4, -3.0]]


def group(sampler: Sequence[list[float] | None], behind: int = 0) -> EncodedGroup:
    return EncodedGroup(prompt={"input_ids": torch.zeros(1, 3, dtype=torch.long)},
                        completions=[[1, 2], [3, 4]], rewards=[1.0, 0.0],
                        sampler_logprobs=list(sampler), behind=behind)


def test_an_older_versions_group_takes_its_samplers_log_probs_as_logp_old() -> None:
    logp = torch.tensor(CURRENT)
    mask = torch.ones(2, 2)
    old, weights, sampler = old_and_weights(group(SAMPLER, behind=2), logp, None, mask,
                                             LossSettings())
    assert torch.equal(old, torch.tensor(SAMPLER)) and weights is None
    assert sampler is not None
    # several epochs: the pre-update pass does not replace the policy that sampled it
    old, _, _ = old_and_weights(group(SAMPLER, behind=1), logp, logp + 1.0, mask,
                                 LossSettings())
    assert torch.equal(old, torch.tensor(SAMPLER))


def test_a_served_versions_group_keeps_logp_old_and_the_truncated_weight() -> None:
    logp = torch.tensor(CURRENT)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    old, weights, _ = old_and_weights(group(SAMPLER), logp, None, mask, LossSettings(tis_cap=2.0))
    assert torch.equal(old, logp)
    expected = torch.exp(logp - torch.tensor(SAMPLER)).clamp(max=2.0) * mask
    assert weights is not None and torch.allclose(weights, expected)


def test_missing_sampler_log_probs_give_no_weight_and_no_off_policy_ratio() -> None:
    logp = torch.tensor(CURRENT)
    old, weights, sampler = old_and_weights(group([SAMPLER[0], None], behind=1), logp, None,
                                             torch.ones(2, 2), LossSettings())
    assert torch.equal(old, logp) and weights is None and sampler is None


class Toy(nn.Module):
    """A 'policy' whose plan log-probs are ``CURRENT`` shifted by one parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.shift = nn.Parameter(torch.zeros(()))


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Toy:
    def logprobs(model: Any, g: EncodedGroup, **_: Any) -> Tensor:
        return torch.tensor(CURRENT) + model.shift

    monkeypatch.setattr(update, "plan_logprobs", logprobs)
    monkeypatch.setattr(update, "move_group", lambda g, device: g)
    return Toy()


def test_an_update_counts_off_policy_groups_and_missing_sampler_log_probs(toy: Toy) -> None:
    groups = [group(SAMPLER), group(SAMPLER, behind=1), group([None, None]),
              group([None, SAMPLER[1]], behind=3)]
    optimizer = torch.optim.SGD(toy.parameters(), lr=0.1)
    metrics = train_step(toy, optimizer, groups, LossSettings())
    assert metrics["off_policy_groups"] == 1.0
    assert metrics["sampler_logprobs_missing"] == 2.0
    # only the served version's group is importance-weighted: 4 tokens
    raw = torch.exp(torch.tensor(CURRENT) - torch.tensor(SAMPLER))
    assert metrics["is_weight_mean"] == pytest.approx(float(raw.clamp(max=2.0).mean()))
    # the ratio of the off-policy group is pi_theta / pi_sampler, not 1
    ratios = 3 * 4 * 1.0 + float(raw.sum())
    assert metrics["ratio_mean"] == pytest.approx(ratios / 16)
    measured = measure_step(toy, groups, LossSettings())
    assert measured["off_policy_groups"] == 1.0 and measured["sampler_logprobs_missing"] == 2.0


def test_an_on_policy_batch_reports_nothing_missing(toy: Toy) -> None:
    optimizer = torch.optim.SGD(toy.parameters(), lr=0.1)
    metrics = train_step(toy, optimizer, [group(SAMPLER)], LossSettings())
    assert metrics["off_policy_groups"] == 0.0 and metrics["sampler_logprobs_missing"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx(1.0)
