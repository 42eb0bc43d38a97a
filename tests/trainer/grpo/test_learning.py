"""The whole stage-1 loop on real parts: the real planner service samples groups, the real
master stores and leases them, the trainer updates the tiny planner, publishes every version,
and the planner service serves it to the next groups.

The task is synthetic (``conftest.synthetic_reward``: the share of lowercase letters and
spaces in the plan text). The test fails unless the mean reward of the sampled plans reaches
0.9 within ``MAX_UPDATES`` updates; the learning curve (mean sampled reward per update, with
the version that sampled it) is logged and written as JSON (``CODA_LEARNING_CURVE_OUT``).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import httpx
import pytest

from coda.clients.master import MasterClient
from coda.clients.planner import PlannerClient
from coda.contracts.training import ModelRole
from tests.fixtures.services import TOKENS
from tests.trainer.conftest import (
    LORA_TARGETS,
    MAX_PIXELS,
    make_state,
    sample_group,
    store_screens,
)
from trainer.config import TrainerConfig
from trainer.grpo.loop import Trainer

log = logging.getLogger(__name__)

G = 8
GROUPS_PER_UPDATE = 4
MAX_UPDATES = 40
TARGET = 0.9


def trainer_config(master, tiny_model_dir: Path, artifacts_dir: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                   planner_url: str, **extra: object) -> TrainerConfig:
    values: dict[str, object] = dict(
        master_url=master.url, master_token=master.admin_token, model=str(tiny_model_dir),
        artifacts_url=f"file://{artifacts_dir}", checkpoint_dir=str(tmp_path / "ckpt"),
        planner_urls=[planner_url], planner_token=TOKENS.admin, run_name="tiny", device="cpu",
        max_pixels=MAX_PIXELS,
        groups_per_update=GROUPS_PER_UPDATE, learning_rate=5e-3, lora_rank=8, lora_alpha=16,
        lora_targets=LORA_TARGETS, publish_every=1, max_staleness=0, seed=0, poll_s=0.2)
    values.update(extra)
    return TrainerConfig(**values)  # type: ignore[arg-type]


@pytest.mark.slow
async def test_grpo_raises_the_reward_of_the_tiny_planner_and_versions_go_live(
        master, planner_process, artifacts_dir: Path, tiny_model_dir: Path,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    screen, previous = store_screens(artifacts_dir)
    state = make_state(screen, previous)
    cfg = trainer_config(master, tiny_model_dir, artifacts_dir, tmp_path, planner_process.url)
    trainer = Trainer(cfg)
    curve: list[dict[str, object]] = []
    async with MasterClient(master.url, token=master.admin_token) as m, \
            PlannerClient(planner_process.url, token=TOKENS.inference, timeout=120) as planner:
        expected_version = "base"
        for update in range(MAX_UPDATES):
            groups = [await sample_group(planner, state, n=G, seed=1000 * update + k)
                      for k in range(GROUPS_PER_UPDATE)]
            # every plan carries the version the trainer published last
            assert {c.planner_version for g in groups for c in g.candidates} == \
                {expected_version}
            rewards = [c.reward for g in groups for c in g.candidates]
            mean = sum(rewards) / len(rewards)
            curve.append({"update": update, "sampled_by": expected_version,
                          "reward_mean": round(mean, 4)})
            log.info("learning curve: update %d sampled by %s: mean reward %.3f", update,
                     expected_version, mean)
            if mean >= TARGET:
                break
            for g in groups:
                await m.create_group(g)
            report = await trainer.run_once()
            assert report.update == update + 1
            assert report.trained + sum(report.dropped.values()) == GROUPS_PER_UPDATE
            assert report.published is not None
            expected_version = report.published
        _write_curve(curve)
        assert curve[-1]["reward_mean"] >= TARGET, f"no convergence: {curve}"  # type: ignore[operator]
        assert curve[0]["reward_mean"] < 0.75  # type: ignore[operator]
        assert len(curve) > 3

        # the master knows every version, the last one is current, with its lineage
        versions = (await m.list_versions(ModelRole.PLANNER)).items
        assert [v.name for v in versions] == [c["sampled_by"] for c in curve[1:]]
        assert versions[-1].is_current and versions[-1].parent == curve[-2]["sampled_by"]
        assert versions[0].parent == "base" and versions[-1].adapter_uri
        # the planner keeps the latest versions loaded, the newest as default
        adapters = (await planner.list_adapters()).items
        assert [a.version for a in adapters if a.is_default] == [versions[-1].name]
        assert len(adapters) <= 1 + cfg.keep_loaded
        # the figures per update and per planner version reached the master
        figures = (await m.training_metrics(run="tiny")).items
        assert [f.update for f in figures] == list(range(1, len(curve)))
        for key in ("reward_mean", "reward_std", "loss", "clip_fraction", "tokens_per_s",
                    "groups_per_s", "grad_norm"):
            assert key in figures[-1].metrics
        by_version = await m.training_by_version(run="tiny")
        assert [v.planner_version for v in by_version] == [c["sampled_by"]
                                                          for c in curve[:-1]]
        page = httpx.get(f"{master.url}/", headers={"authorization":
                                                      f"Bearer {master.admin_token}"}).text
        assert 'id="training"' in page and 'id="curve-reward_mean"' in page
        assert versions[-1].name in page or curve[-2]["sampled_by"] in page
        # all groups were consumed exactly once
        counts = httpx.get(f"{master.url}/v1/groups/counts", headers={
            "authorization": f"Bearer {master.admin_token}"}).json()
        assert counts.get("consumed", 0) + counts.get("dropped", 0) == \
            GROUPS_PER_UPDATE * (len(curve) - 1)
        assert counts.get("ready", 0) == counts.get("leased", 0) == 0
    await trainer.aclose()


def _write_curve(curve: list[dict[str, object]]) -> None:
    out = os.environ.get("CODA_LEARNING_CURVE_OUT")
    if out:
        Path(out).write_text(json.dumps({
            "task": "share of lowercase letters and spaces in the plan text (U+FFFD ignored)",
            "model": "tiny random Qwen2.5-VL (coda.inference.tiny), LoRA r=8 incl. lm_head",
            "G": G, "groups_per_update": GROUPS_PER_UPDATE, "max_tokens": 4,
            "learning_rate": 5e-3, "target": TARGET, "curve": curve}, indent=2))
