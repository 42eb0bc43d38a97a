"""Crash safety: ``kill -9`` of a training ``coda trainer`` process, restart, and every group is
trained on exactly once in the surviving run; the ledger covers a crash between checkpoint and
ack; optimizer state survives."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import torch

from coda.clients.master import MasterClient
from coda.contracts.master_api import GroupLeaseRequest
from coda.contracts.training import Candidate, Group, StateRef
from tests.trainer.conftest import CLICK, INSTRUCTION, LORA_TARGETS, MAX_PIXELS, store_screens
from trainer.config import TrainerConfig
from trainer.grpo import checkpoint as ckpt
from trainer.grpo.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
PLANS = ["click the file menu", "Open 123 NOW", "save it", "x!", "hello there", "ZZZ", "ok", "9"]


def synthetic_group(screen: str, k: int) -> Group:
    """A group with fixed plans and rewards (no sampling needed to test the bookkeeping)."""
    state = StateRef(step_index=k, instruction=INSTRUCTION, app="demo", screenshot=screen,
                     screen_width=112, screen_height=84)
    cands = [Candidate(plan=p, reward=((i + k) % 5) / 4, planner_version="base")
             for i, p in enumerate(PLANS)]
    return Group(state=state, target=CLICK, candidates=cands, planner_version="base")


async def post_groups(master, screen: str, n: int) -> list[uuid.UUID]:  # type: ignore[no-untyped-def]
    async with MasterClient(master.url, token=master.admin_token) as m:
        return [await m.create_group(synthetic_group(screen, k)) for k in range(n)]


def counts(master) -> dict[str, int]:  # type: ignore[no-untyped-def]
    resp = httpx.get(f"{master.url}/v1/groups/counts",
                     headers={"authorization": f"Bearer {master.admin_token}"})
    return dict(resp.json())


def trainer_env(master, model: Path, artifacts: Path, ckpt_dir: Path) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"CODA_TRAINER_MASTER_URL": master.url, "CODA_TRAINER_MASTER_TOKEN": master.admin_token,
            "CODA_TRAINER_MODEL": str(model), "CODA_TRAINER_ARTIFACTS_URL": f"file://{artifacts}",
            "CODA_TRAINER_CHECKPOINT_DIR": str(ckpt_dir), "CODA_TRAINER_DEVICE": "cpu",
            "CODA_TRAINER_MAX_PIXELS": str(MAX_PIXELS), "CODA_TRAINER_GROUPS_PER_UPDATE": "2",
            "CODA_TRAINER_LORA_RANK": "4", "CODA_TRAINER_LORA_TARGETS": LORA_TARGETS,
            "CODA_TRAINER_LEARNING_RATE": "1e-3", "CODA_TRAINER_LEASE_TTL_S": "3",
            "CODA_TRAINER_PUBLISH_EVERY": "2", "CODA_TRAINER_MAX_STALENESS": "100",
            "CODA_TRAINER_POLL_S": "0.2", "CODA_TRAINER_RUN_NAME": "crash",
            "CODA_TRAINER_LOG_LEVEL": "INFO", "CODA_TRAINER_KEEP_CHECKPOINTS": "3"}


def start_trainer(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "coda_app.cli", "trainer", *args], cwd=ROOT,
                                env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT)


def test_kill_9_during_training_then_resume_trains_each_group_once(
        master, artifacts_dir: Path, tiny_model_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    screen, _ = store_screens(artifacts_dir)
    ids = asyncio.run(post_groups(master, screen, 16))
    ckpt_dir = tmp_path / "ckpt"
    env = trainer_env(master, tiny_model_dir, artifacts_dir, ckpt_dir)
    log = tmp_path / "trainer.log"
    proc = start_trainer(env, log)
    # kill -9 while an update is under way: a checkpoint exists and groups are leased, unacked
    deadline = time.monotonic() + 240
    killed_at = None
    while time.monotonic() < deadline and proc.poll() is None:
        latest = ckpt.latest_checkpoint(ckpt_dir)
        if latest is not None and ckpt.read_state(latest).update >= 2 \
                and counts(master).get("leased", 0) > 0:
            os.kill(proc.pid, signal.SIGKILL)
            killed_at = ckpt.read_state(latest).update
            break
        time.sleep(0.05)
    proc.wait(timeout=30)
    assert killed_at is not None, log.read_text()[-3000:]
    assert proc.returncode == -signal.SIGKILL
    before = counts(master)
    assert before.get("consumed", 0) < 16

    # restart: resumes from the checkpoint, leases again what the dead process held
    proc = start_trainer(env, log, "--idle-exit-s", "8")
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    after = counts(master)
    assert after == {"consumed": 16}, after
    state = ckpt.read_state(ckpt.latest_checkpoint(ckpt_dir))  # type: ignore[arg-type]
    assert sorted(state.trained) == sorted(str(i) for i in ids)  # each group once
    assert state.update == 8 and state.counts["consumed"] == 16
    assert state.pending_acks == []
    assert state.versions[0] == "base" and state.versions[-1] == "crash-000008"
    opt = torch.load(Path(ckpt.latest_checkpoint(ckpt_dir)) / "optimizer.pt",  # type: ignore[arg-type]
                     weights_only=False)["optimizer"]
    steps = {int(s["step"]) for s in opt["state"].values()}
    assert steps == {8}  # Adam's step count continued across the restart
    text = log.read_text()
    assert "trainer.resumed" in text


async def test_a_crash_between_checkpoint_and_ack_loses_nothing_and_trains_nothing_twice(
        master, artifacts_dir: Path, tiny_model_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    screen, _ = store_screens(artifacts_dir)
    ids = await post_groups(master, screen, 4)
    cfg = TrainerConfig(
        master_url=master.url, master_token=master.admin_token, model=str(tiny_model_dir),
        artifacts_url=f"file://{artifacts_dir}", checkpoint_dir=str(tmp_path / "ckpt"),
        device="cpu", max_pixels=MAX_PIXELS, groups_per_update=2, lora_rank=4,
        lease_ttl_s=1, publish_every=100, run_name="ledger")
    first = Trainer(cfg)

    async def crash(*_: object) -> None:
        raise RuntimeError("crash before the acks")

    first._flush_acks = crash  # type: ignore[method-assign]
    with contextlib.suppress(RuntimeError):
        await first.run_once()
    await first.aclose()
    state = ckpt.read_state(ckpt.latest_checkpoint(cfg.checkpoint_dir))  # type: ignore[arg-type]
    assert state.update == 1 and len(state.pending_acks) == 2
    trained_first = set(state.trained)
    master.advance_clock(1.5)  # the leases run out and someone else leases the groups
    async with MasterClient(master.url, token=master.admin_token) as m:
        taken = (await m.lease_groups(GroupLeaseRequest(max_groups=2, ttl_s=1))).items
    assert {str(g.id) for g in taken} == trained_first

    second = Trainer(cfg)
    await second.start()  # the pending acks: their tokens are no longer valid (409)
    reports = await second.run(max_updates=1)  # trains the two other groups
    master.advance_clock(1.2)  # the other lease runs out: the trained groups come back
    again = await second.run_once()
    await second.aclose()
    assert len(reports) == 1 and reports[0].trained == 2
    assert again.update is None and again.dropped == {"already_trained": 2}
    state = ckpt.read_state(ckpt.latest_checkpoint(cfg.checkpoint_dir))  # type: ignore[arg-type]
    assert state.update == 2
    assert sorted(state.trained) == sorted(str(i) for i in ids)
    assert not trained_first & set(state.trained[2:])
    assert counts(master) == {"consumed": 4}
