"""The control runs (issue 37, point 4): the derangement (the anti-learning control, old name
``shuffle``), the uniform permutation (a null) and ``zero`` (no optimizer step at all).

The permutations are pure and checked exactly or over many seeds (every seed is fixed, so the
tests are deterministic); ``zero`` is checked on a real loop update of the tiny model: every
parameter stays bit-identical, and every published version holds the very same weights."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime
from itertools import permutations
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from coda.contracts.training import Candidate, Group, GroupRecord, GroupStatus, StateRef
from tests.trainer.conftest import CLICK, INSTRUCTION, LORA_TARGETS, MAX_PIXELS, store_screens
from trainer.config import RewardControl, TrainerConfig
from trainer.grpo.losses import controlled_rewards, derangement, uniform_permutation

SEEDS = range(3000)


def chi_square(counts: Counter[Any], cells: list[Any]) -> float:
    expected = sum(counts.values()) / len(cells)
    return sum((counts[c] - expected) ** 2 / expected for c in cells)


# -- the permutations (pure) -------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_the_derangement_never_leaves_a_plan_in_place(n: int) -> None:
    for seed in range(300):
        perm = derangement(n, f"group-{seed}")
        assert sorted(perm) == list(range(n))
        assert all(perm[i] != i for i in range(n))
        assert derangement(n, f"group-{seed}") == perm  # seeded


def test_the_derangement_gives_each_plan_a_uniform_other_plan() -> None:
    """``perm[i]`` is uniform over the other plans, so in expectation plan i's advantage is
    ``-1/(G-1)`` of its own: the anti-learning control."""
    n = 4
    got = Counter(derangement(n, s)[0] for s in SEEDS)
    assert got[0] == 0
    assert chi_square(got, [1, 2, 3]) < 16  # 2 degrees of freedom: p < 0.001
    rewards = [1.0, 0.0, 0.25, 0.5]
    mean = sum(rewards) / n
    received = [sum(controlled_rewards(rewards, "derangement", s)[i] for s in SEEDS) / len(SEEDS)
                for i in range(n)]
    for i in range(n):
        assert received[i] - mean == pytest.approx(-(rewards[i] - mean) / (n - 1), abs=0.03)


def test_the_derangement_is_todays_shuffle() -> None:
    """The same seeds give the same permutations as the control called ``shuffle`` before
    (results of earlier runs stay reproducible), and ``shuffle`` is still accepted."""
    rewards = [float(i) for i in range(8)]
    assert controlled_rewards(rewards, "derangement", "group-0") == [
        1.0, 0.0, 6.0, 4.0, 3.0, 7.0, 2.0, 5.0]
    assert controlled_rewards(rewards[:5], "derangement", "abc") == [1.0, 3.0, 4.0, 2.0, 0.0]
    for seed in range(20):
        assert controlled_rewards(rewards, "shuffle", seed) == \
            controlled_rewards(rewards, "derangement", seed)


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_the_uniform_permutation_is_a_seeded_permutation(n: int) -> None:
    for seed in range(300):
        perm = uniform_permutation(n, f"group-{seed}")
        assert sorted(perm) == list(range(n))
        assert uniform_permutation(n, f"group-{seed}") == perm


def test_the_uniform_permutation_is_uniform_and_may_keep_a_plan_in_place() -> None:
    """Over G = 3 every one of the 6 permutations (4 of them keep a plan in place) is as
    likely; over G = 8 a plan keeps its own reward 1/8 of the time (one fixed point on
    average)."""
    cells = list(permutations(range(3)))
    got = Counter(tuple(uniform_permutation(3, s)) for s in SEEDS)
    assert set(got) == set(cells)
    assert chi_square(got, cells) < 20.5  # 5 degrees of freedom: p < 0.001
    kept = sum(1 for s in SEEDS if any(p == i for i, p in enumerate(uniform_permutation(3, s))))
    assert kept / len(SEEDS) == pytest.approx(4 / 6, abs=0.03)
    fixed = [sum(p == i for i, p in enumerate(uniform_permutation(8, s))) for s in SEEDS]
    assert sum(fixed) / len(SEEDS) == pytest.approx(1.0, abs=0.06)
    rewards = [1.0, 0.0, 0.25, 0.5]
    mean = sum(rewards) / 4
    for i in range(4):  # in expectation a plan gets the group's mean: no advantage
        got_i = sum(controlled_rewards(rewards, "uniform", s)[i] for s in SEEDS) / len(SEEDS)
        assert got_i == pytest.approx(mean, abs=0.03)


def test_zero_and_none_leave_the_rewards_and_the_names_parse() -> None:
    rewards = [1.0, 0.0, 0.5, 0.5]
    assert controlled_rewards(rewards, "zero", "g") == rewards  # zero: no step, not new rewards
    assert controlled_rewards(rewards, "none", "g") == rewards
    for control in ("derangement", "uniform", "shuffle"):
        assert controlled_rewards([1.0], control, "g") == [1.0]
    assert RewardControl("shuffle") is RewardControl.DERANGEMENT
    assert RewardControl("Shuffle") is RewardControl.DERANGEMENT
    assert TrainerConfig(reward_control="shuffle").reward_control is RewardControl.DERANGEMENT
    with pytest.raises(ValueError):
        RewardControl("permute")


def test_the_old_name_comes_in_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from coda_app.learning.settings import LearnSettings

    monkeypatch.setenv("CODA_TRAINER_REWARD_CONTROL", "shuffle")
    monkeypatch.setenv("CODA_LEARN_REWARD_CONTROL", "shuffle")
    assert TrainerConfig().reward_control is RewardControl.DERANGEMENT
    assert LearnSettings().reward_control is RewardControl.DERANGEMENT
    monkeypatch.setenv("CODA_LEARN_REWARD_CONTROL", "uniform")
    assert LearnSettings().reward_control is RewardControl.UNIFORM


# -- zero: a real loop update that changes nothing ---------------------------------------------

PLANS = ["click the file menu", "Open 123 NOW", "save it", "x!"]


class FakeMaster:
    """What the trainer asks of the master, in memory: leases hand out the queued groups."""

    def __init__(self) -> None:
        self.queue: list[GroupRecord] = []
        self.acks: list[tuple[str, str]] = []
        self.versions: list[Any] = []

    def add(self, screen: str, rewards: list[float]) -> None:
        state = StateRef(step_index=0, instruction=INSTRUCTION, app="demo", screenshot=screen,
                         screen_width=112, screen_height=84)
        group = Group(state=state, target=CLICK, planner_version="base", candidates=[
            Candidate(plan=p, reward=r, planner_version="base")
            for p, r in zip(PLANS, rewards, strict=True)])
        self.queue.append(GroupRecord(id=uuid.uuid4(), status=GroupStatus.LEASED, group=group,
                                      created_at=datetime.now(UTC), lease_token="t"))

    async def lease_groups(self, req: Any) -> Any:
        items, self.queue = self.queue[:req.max_groups], self.queue[req.max_groups:]
        return SimpleNamespace(items=items)

    async def ack_group(self, group_id: uuid.UUID, token: str, status: GroupStatus) -> None:
        self.acks.append((str(group_id), str(status)))

    async def report_training(self, body: Any) -> None:
        pass

    async def register_version(self, spec: Any) -> None:
        self.versions.append(spec)

    async def aclose(self) -> None:
        pass


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    state = {f"p:{n}": p.detach().clone() for n, p in model.named_parameters()}
    state.update({f"b:{n}": b.detach().clone() for n, b in model.named_buffers()})
    return state


def changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    after = snapshot(model)
    assert after.keys() == before.keys()
    return [k for k in before if not torch.equal(before[k], after[k])]


def published(cfg: TrainerConfig, version: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(Path(cfg.adapter_root().removeprefix("file://")) / version
                         / "adapter_model.safetensors"))


async def updates(control: RewardControl, model_dir: Path, tmp_path: Path,
                  ) -> tuple[list[str], list[Any], TrainerConfig]:
    """Two loop updates under ``control`` (a high learning rate, KL and weight decay: every
    way a step could move a weight); the parameters they changed and their reports."""
    from trainer.grpo.loop import Trainer

    artifacts = tmp_path / "artifacts"
    screen, _ = store_screens(artifacts)
    cfg = TrainerConfig(
        master_url="http://127.0.0.1:9", model=str(model_dir),
        artifacts_url=f"file://{artifacts}", checkpoint_dir=str(tmp_path / "ckpt"),
        device="cpu", max_pixels=MAX_PIXELS, lora_rank=4, lora_targets=LORA_TARGETS,
        groups_per_update=2, publish_every=1, run_name=f"ctl-{control}", learning_rate=5e-2,
        beta=0.05, weight_decay=0.1, reward_control=control)
    trainer = Trainer(cfg)
    fake = FakeMaster()
    trainer._master = fake  # type: ignore[assignment]
    before = snapshot(trainer.model)
    reports = []
    for k in range(2):
        fake.add(screen, [1.0, 0.0, 0.5, 0.25 * k])
        fake.add(screen, [0.0, 1.0, 0.0, 0.5])
        reports.append(await trainer.run_once())
    moved = changed(before, trainer.model)
    if control is RewardControl.ZERO:
        assert not trainer.optimizer.state  # the optimizer never stepped
    await trainer.aclose()
    assert [v.name for v in fake.versions] == [r.published for r in reports]
    assert sum(1 for _, status in fake.acks if status == "consumed") == 4
    return moved, reports, cfg


async def test_zero_takes_no_step_and_publishes_the_same_weights(tiny_model_dir: Path,
                                                                  tmp_path: Path) -> None:
    moved, reports, cfg = await updates(RewardControl.ZERO, tiny_model_dir, tmp_path / "zero")
    assert moved == []  # every parameter and buffer bit-identical
    assert [r.update for r in reports] == [1, 2] and all(r.trained == 2 for r in reports)
    for r in reports:  # measured: the real rewards, the loss; no step taken
        assert r.metrics["optimizer_step"] == 0.0
        assert r.metrics["grad_norm"] == 0.0
        assert r.metrics["reward_mean"] > 0 and r.metrics["groups"] == 2
    # every leased plan with the best reward it earned (what coda learn counts as rewarded)
    assert reports[0].plan_rewards == {PLANS[0]: 1.0, PLANS[1]: 1.0, PLANS[2]: 0.5,
                                       PLANS[3]: 0.5}
    first, second = (published(cfg, r.published) for r in reports)
    assert first.keys() == second.keys() and first
    assert all(torch.equal(first[k], second[k]) for k in first)
    # LoRA's B starts at zero: the published adapter is the identity on the starting model
    assert all(not t.any() for k, t in first.items() if "lora_B" in k)

    # the same updates with the rewards do move the weights (the check above can fail)
    moved, reports, _ = await updates(RewardControl.NONE, tiny_model_dir, tmp_path / "none")
    assert moved and all(r.metrics["optimizer_step"] == 1.0 for r in reports)
