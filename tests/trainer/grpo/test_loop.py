"""The trainer loop's choices on real groups from a real master: truncated importance weights
from the sampler's log-probabilities, an older version's group trained against its sampler,
groups without sampler log-probs counted, groups dropped by reason (stale, unknown version, no
signal), figures to the master and to TensorBoard."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from coda.clients.master import MasterClient
from coda.contracts.training import Candidate, Group, StateRef
from tests.trainer.conftest import CLICK, INSTRUCTION, LORA_TARGETS, MAX_PIXELS, store_screens
from trainer.config import TrainerConfig
from trainer.data import PromptOptions, encode_group
from trainer.grpo.loop import Trainer, finite
from trainer.logprobs import shared_logprobs

PLANS = ["click the file menu", "Open 123 NOW", "save it", "x!"]


def config(master, model: Path, artifacts: Path, tmp_path: Path, **extra: object) -> TrainerConfig:  # type: ignore[no-untyped-def]
    values: dict[str, object] = dict(
        master_url=master.url, master_token=master.admin_token, model=str(model),
        artifacts_url=f"file://{artifacts}", checkpoint_dir=str(tmp_path / "ckpt"),
        device="cpu", max_pixels=MAX_PIXELS, lora_rank=4, lora_targets=LORA_TARGETS,
        groups_per_update=8, tis_cap=2.0, publish_every=100, run_name="loop")
    values.update(extra)
    return TrainerConfig(**values)  # type: ignore[arg-type]


def group(screen: str, version: str, rewards: list[float], **cand: object) -> Group:
    state = StateRef(step_index=0, instruction=INSTRUCTION, app="demo", screenshot=screen,
                     screen_width=112, screen_height=84)
    cands = [Candidate(plan=p, reward=r, planner_version=version, **cand)  # type: ignore[arg-type]
             for p, r in zip(PLANS, rewards, strict=True)]
    return Group(state=state, target=CLICK, candidates=cands, planner_version=version)


@pytest.mark.slow
async def test_importance_weights_drops_and_figures(master, artifacts_dir: Path,  # type: ignore[no-untyped-def]
                                                    tiny_model_dir: Path, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    screen, _ = store_screens(artifacts_dir)
    cfg = config(master, tiny_model_dir, artifacts_dir, tmp_path,
                 tensorboard_dir=str(tmp_path / "tb"))
    trainer = Trainer(cfg)
    # the sampler's log-probs: the policy's own, shifted to play a sampler that lags behind it
    plain = group(screen, "base", [1.0, 0.0, 0.5, 0.25])
    enc = encode_group(trainer.processor, plain, trainer.read,
                       PromptOptions(max_pixels=MAX_PIXELS))
    with torch.no_grad():
        own = shared_logprobs(trainer.model, enc)
    shifts = []
    cands = []
    for i, (c, ids) in enumerate(zip(plain.candidates, enc.completions, strict=True)):
        delta = [(-1.0 if (i + t) % 2 else 0.5) for t in range(len(ids))]  # w = e^1 or e^-0.5
        shifts += delta
        lps = [float(own[i, t]) + d for t, d in enumerate(delta)]
        cands.append(c.model_copy(update={"token_ids": ids, "logprobs": lps}))
    with_lp = plain.model_copy(update={"candidates": cands})
    async with MasterClient(master.url, token=master.admin_token) as m:
        await m.create_group(with_lp)
        await m.create_group(group(screen, "nobody-knows-this-version", [1, 0, 0, 0]))
        await m.create_group(group(screen, "base", [0.5, 0.5, 0.5, 0.5]))  # no signal
        report = await trainer.run_once()
        figures = (await m.training_metrics(run="loop")).items
    assert report.update == 1 and report.trained == 1
    assert report.dropped == {"unknown_version": 1, "no_signal": 1}
    weights = [min(math.exp(-d), 2.0) for d in shifts]
    m1 = report.metrics
    assert m1["is_weight_mean"] == pytest.approx(sum(weights) / len(weights), rel=1e-4)
    assert m1["is_truncated_fraction"] == pytest.approx(
        sum(1 for d in shifts if math.exp(-d) > 2) / len(shifts))
    assert m1["is_weight_max"] == pytest.approx(math.e, rel=1e-4)
    assert m1["is_weight_min"] == pytest.approx(math.exp(-0.5), rel=1e-4)
    assert m1["dropped_unknown_version"] == 1 and m1["dropped_no_signal"] == 1
    assert figures[-1].metrics["is_weight_mean"] == pytest.approx(m1["is_weight_mean"])

    # staleness in versions: two versions later, a group sampled by 'base' is 2 versions behind
    trainer.state.versions += ["loop-a", "loop-b"]
    trainer.cfg.max_staleness = 1
    async with MasterClient(master.url, token=master.admin_token) as m:
        await m.create_group(group(screen, "base", [1, 0, 0, 0]))
        await m.create_group(group(screen, trainer.state.versions[-1], [1, 0, 0, 0]))
        report = await trainer.run_once()
    assert report.dropped == {"stale": 1} and report.trained == 1
    # its plans carry no sampler log-probs: no weight, and counted, never silently weighted 1
    assert report.metrics["sampler_logprobs_missing"] == 1
    assert report.metrics["off_policy_groups"] == 0 and "is_weight_mean" not in report.metrics

    # a group of the version before the served one is trained against its sampler's log-probs
    older = with_lp.model_copy(update={"planner_version": "loop-a", "candidates": [
        c.model_copy(update={"planner_version": "loop-a"}) for c in with_lp.candidates]})
    async with MasterClient(master.url, token=master.admin_token) as m:
        await m.create_group(older)
        report = await trainer.run_once()
    assert report.trained == 1 and report.metrics["off_policy_groups"] == 1
    assert report.metrics["sampler_logprobs_missing"] == 0
    assert "is_weight_mean" not in report.metrics  # its ratio is pi_theta / pi_sampler itself
    assert report.metrics["ratio_mean"] != pytest.approx(1.0)
    await trainer.aclose()

    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"charts/reward_mean", "losses/loss", "charts/is_weight_mean",
            "charts/tokens_per_s", "charts/groups_per_s"} <= tags
    assert [e.step for e in events.Scalars("charts/reward_mean")] == [1, 2, 3]


async def test_kl_against_the_disabled_adapter(master, artifacts_dir: Path,  # type: ignore[no-untyped-def]
                                               tiny_model_dir: Path, tmp_path: Path) -> None:
    """beta > 0: the reference is the base model with the adapter disabled (no second model);
    after a few updates the policy moved away from it and the KL is positive."""
    screen, _ = store_screens(artifacts_dir)
    cfg = config(master, tiny_model_dir, artifacts_dir, tmp_path, beta=0.05,
                 learning_rate=5e-2, groups_per_update=1, epochs_per_update=2)
    trainer = Trainer(cfg)
    assert trainer.ref_model is None
    kls = []
    async with MasterClient(master.url, token=master.admin_token) as m:
        for k in range(3):
            await m.create_group(group(screen, "base", [1.0, 0.0, 0.5, 0.25 * k]))
            report = await trainer.run_once()
            kls.append(report.metrics["kl"])
    await trainer.aclose()
    assert kls[0] == pytest.approx(0.0, abs=1e-9)  # LoRA starts as the identity
    assert kls[-1] > 1e-6
    assert report.metrics["clip_fraction"] >= 0.0 and report.metrics["ratio_mean"] > 0


def test_only_finite_figures_are_reported() -> None:
    """A diverged figure is left out of the report and the version's metrics: the master
    holds finite numbers only (a NaN there would refuse the whole report or version)."""
    assert finite({"loss": 0.5, "kl": float("nan"), "ratio": float("inf"),
                   "clip": float("-inf")}) == {"loss": 0.5}
