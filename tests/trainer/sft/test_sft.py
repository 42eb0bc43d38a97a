"""Stage 2 on real parts: episodes with steps and screenshots in a real master, judge verdicts
stored there, ``coda dataset export`` (filters by app, batch, version and verdict) writes a
parquet dataset of planner turns, ``coda train sft`` lowers its loss and publishes a version."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from coda.clients.master import MasterClient
from coda.contracts.master_api import BatchCreate, WorkerRegister
from coda.contracts.records import EpisodeResult, JobKind, ScreenSize, Step
from coda.contracts.training import ModelRole, Verdict
from tests.trainer.conftest import LORA_TARGETS, MAX_PIXELS, png
from trainer.sft.dataset import ExportFilter, export_dataset, load_rows, row_messages

ROOT = Path(__file__).resolve().parents[3]
log = logging.getLogger(__name__)
TASKS = [{"id": "kalg-1", "app": "KAlgebra", "instruction": "Plot y = x^2"},
         {"id": "celes-1", "app": "Celestia", "instruction": "Go to Mars"},
         {"id": "kalg-2", "app": "KAlgebra", "instruction": "Compute 2 + 2"}]
THOUGHTS = ["Thought: open the plot view\nAction: click(start_box='(10,20)')",
            "Thought: type the formula\nAction: type(content='x^2')",
            "Thought: done\nAction: finished()"]


async def judged_episodes(master) -> tuple[uuid.UUID, dict[str, uuid.UUID]]:  # type: ignore[no-untyped-def]
    """Three finished episodes with 3 steps each; KAlgebra #1 and Celestia judged correct,
    KAlgebra #2 judged wrong."""
    async with MasterClient(master.url, token=master.admin_token) as admin, \
            MasterClient(master.url, token=master.worker_token) as worker:
        created = await admin.create_batch(BatchCreate(tasks=TASKS, planner_version="base"))
        me = await worker.register_worker(WorkerRegister(name="w", slots=3))
        jobs = await worker.lease(me.id, JobKind.EPISODE, capacity=3)
        assert len(jobs) == 3
        ids: dict[str, uuid.UUID] = {}
        for n, job in enumerate(jobs):
            task = job.payload["task"]["id"]
            for i, thought in enumerate(THOUGHTS):
                key = (await worker.upload_artifact(png((40 * i, 10 * n, 90)))).key
                await worker.report_step(job, Step(index=i, thought=thought, screenshot=key,
                                                   screen=ScreenSize(width=90, height=40),
                                                   planner_version="base"))
            await worker.complete(job, EpisodeResult(success=True, steps=3).model_dump())
            ids[task] = uuid.UUID(job.payload["episode_id"])
        for task, episode in ids.items():
            await worker.set_verdict(episode, Verdict(correct=task != "kalg-2",
                                                      positive_steps=[0, 1, 2]))
    return created.batch.id, ids


async def test_export_filters(master, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    batch, ids = await judged_episodes(master)
    async with MasterClient(master.url, token=master.admin_token) as m:
        both = await export_dataset(m, tmp_path / "all", ExportFilter())
        kalg = await export_dataset(m, tmp_path / "kalg", ExportFilter(apps=["KAlgebra"]))
        wrong = await export_dataset(m, tmp_path / "wrong", ExportFilter(verdict="incorrect"))
        anyv = await export_dataset(m, tmp_path / "any", ExportFilter(verdict="any",
                                                                        batch_id=str(batch)))
        other = await export_dataset(m, tmp_path / "none",
                                     ExportFilter(planner_version="grpo-000001"))
        mine = await export_dataset(m, tmp_path / "v", ExportFilter(planner_version="base"))
    assert (both.trajectories, both.rows) == (2, 6)
    assert both.apps == {"KAlgebra": 3, "Celestia": 3}
    assert (kalg.trajectories, wrong.trajectories, anyv.trajectories) == (1, 1, 3)
    assert (other.rows, mine.rows) == (0, 6)
    rows = load_rows(tmp_path / "all")
    assert len(rows) == 6 and set(rows["episode_id"]) == {str(ids["kalg-1"]),
                                                         str(ids["celes-1"])}
    third = next(r for r in rows if r["step_index"] == 2)
    assert third["history_texts"] == THOUGHTS[:2] and len(third["history_images"]) == 1
    assert third["target"] == THOUGHTS[2] and third["verdict_correct"]
    # a row rebuilds the planner's conversation: system, past turns, the current screenshot
    messages = row_messages(third)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user",
                                             "assistant", "user"]
    assert messages[2]["content"] == THOUGHTS[0]
    assert len(load_rows(tmp_path / "none")) == 0


@pytest.mark.slow
def test_dataset_export_then_sft_lowers_the_loss_and_publishes(  # type: ignore[no-untyped-def]
        master, tiny_model_dir: Path, artifacts_dir: Path, tmp_path: Path) -> None:
    import asyncio

    asyncio.run(judged_episodes(master))
    env = {**os.environ, "CODA_ADMIN_TOKEN": master.admin_token, "CODA_LOG_LEVEL": "WARNING"}
    out = tmp_path / "sft-data"
    export = subprocess.run(
        [sys.executable, "-m", "coda_app.cli", "dataset", "export", str(out), "--master-url",
         master.url], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        check=False)
    assert export.returncode == 0, export.stderr[-3000:]
    assert "6 planner turns from 2 trajectories" in export.stderr
    sft_env = {**env, "CODA_SFT_MASTER_TOKEN": master.admin_token, "CODA_SFT_DEVICE": "cpu",
               "CODA_SFT_ARTIFACTS_URL": f"file://{artifacts_dir}",
               "CODA_SFT_MAX_PIXELS": str(MAX_PIXELS), "CODA_SFT_LORA_RANK": "8",
               "CODA_SFT_LORA_TARGETS": LORA_TARGETS, "CODA_SFT_ROWS_PER_STEP": "2",
               "CODA_SFT_LOG_LEVEL": "WARNING"}
    train = subprocess.run(
        [sys.executable, "-m", "coda_app.cli", "train", "sft", str(out), "--model",
         str(tiny_model_dir), "--epochs", "3", "--learning-rate", "5e-3", "--master-url",
         master.url], cwd=ROOT, env=sft_env, capture_output=True, text=True, timeout=600,
        check=False)
    assert train.returncode == 0, train.stderr[-3000:]
    found = re.search(r"loss ([0-9.]+) -> ([0-9.]+) \((\d+) steps", train.stderr)
    assert found, train.stderr[-2000:]
    before, after, steps = float(found[1]), float(found[2]), int(found[3])
    log.info("stage-2 SFT on the exported dataset: %s", found[0])
    assert after < 0.8 * before and steps == 9
    assert "published sft-003" in train.stderr

    async def versions() -> list:  # type: ignore[type-arg]
        async with MasterClient(master.url, token=master.admin_token) as m:
            return (await m.list_versions(ModelRole.PLANNER)).items

    (version,) = asyncio.run(versions())
    assert version.name == "sft-003" and version.is_current and version.parent == "base"
    assert version.metrics["sft_loss_after"] < version.metrics["sft_loss_before"]
    assert Path(version.adapter_uri or "", "adapter_config.json").is_file()
