"""Two CPU processes (gloo, through accelerate under torchrun) compute the same update as one:
equal loss, equal updated weights — with an uneven split of the groups, gradient accumulation
and the KL term."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from coda.contracts.training import Candidate, Group, StateRef
from tests.trainer.conftest import CLICK, INSTRUCTION, store_screens

ROOT = Path(__file__).resolve().parents[3]
WORKER = ROOT / "tests" / "trainer" / "grpo" / "parity_worker.py"
PLANS = ["click the file menu", "Open 123 NOW", "save it", "x!", "hello there", "ZZZ"]


def write_groups(path: Path, screen: str, previous: str, n: int) -> None:
    groups = []
    for k in range(n):
        state = StateRef(step_index=1, instruction=f"{INSTRUCTION} #{k}", app="demo",
                         screen_width=112, screen_height=84,
                         screenshot=screen if k % 2 else previous, previous_screenshot=previous,
                         history=[{"thought": "Thought: start", "screenshot": previous}])
        cands = [Candidate(plan=p, reward=((i * (k + 1)) % 4) / 3) for i, p in enumerate(PLANS)]
        groups.append(Group(state=state, target=CLICK, candidates=cands).model_dump(mode="json"))
    path.write_text(json.dumps(groups))


def run(cmd: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CODA_LOG_LEVEL": "WARNING",
           "MASTER_ADDR": "127.0.0.1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
def test_two_gloo_processes_compute_the_single_process_update(tiny_model_dir: Path,
                                                              tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    screen, previous = store_screens(artifacts)
    groups = tmp_path / "groups.json"
    write_groups(groups, screen, previous, 5)  # 3 + 2 groups: one padded micro-step
    args = [str(groups), str(artifacts), str(tiny_model_dir)]
    run([sys.executable, str(WORKER), *args, str(tmp_path / "one")], tmp_path)
    run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(WORKER), *args, str(tmp_path / "two")], tmp_path)
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert (one["world"], two["world"]) == (1, 2)
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5, abs=1e-7)
    assert two["kl"] == pytest.approx(one["kl"], rel=1e-5, abs=1e-9)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
    assert two["groups"] == one["groups"] == 5 and two["tokens"] == one["tokens"]
    w1 = load_file(str(tmp_path / "one" / "weights.safetensors"))
    w2 = load_file(str(tmp_path / "two" / "weights.safetensors"))
    assert w1.keys() == w2.keys() and w1
    for key in w1:
        assert (w1[key] - w2[key]).abs().max() < 1e-5, key
    # the update did change the adapter
    assert any(float(w.abs().sum()) > 0 for k, w in w1.items() if "lora_B" in k)


@pytest.mark.slow
def test_coda_trainer_under_torchrun_with_two_processes(  # type: ignore[no-untyped-def]
        master, artifacts_dir: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    """The real loop in two processes: rank 0 leases and broadcasts, both train their share,
    rank 0 checkpoints, acks and publishes; every group is consumed once."""
    import asyncio

    from tests.trainer.grpo.test_resume import counts, post_groups, trainer_env
    from trainer.grpo import checkpoint as ckpt

    screen, _ = store_screens(artifacts_dir)
    ids = asyncio.run(post_groups(master, screen, 6))
    env = {**trainer_env(master, tiny_model_dir, artifacts_dir, tmp_path / "ckpt"),
           "CODA_TRAINER_GROUPS_PER_UPDATE": "3", "OMP_NUM_THREADS": "1",
           "CODA_TRAINER_LOG_LEVEL": "WARNING"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "coda_app.cli", "trainer", "--max-updates", "2"], cwd=ROOT,
        env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert counts(master) == {"consumed": 6}
    state = ckpt.read_state(ckpt.latest_checkpoint(tmp_path / "ckpt"))  # type: ignore[arg-type]
    assert state.update == 2 and sorted(state.trained) == sorted(str(i) for i in ids)
    assert state.versions == ["base", "crash-000002"] and state.pending_acks == []
