"""Checkpoints: trained weights (the LoRA adapter, or the full model), optimizer and scheduler
state, RNG, and the trainer's ledger of groups, written atomically.

Layout under ``checkpoint_dir``::

    update-000012/  state.json  weights.safetensors  optimizer.pt  rng.pt
    latest          (the name of the newest complete checkpoint)

A checkpoint is written to a temporary directory and renamed, then ``latest`` is replaced
(``os.replace``): a crash leaves either the old or the new checkpoint, never half of one.

The ledger makes "effect exactly once" hold for groups: groups are acked at the master only
AFTER the checkpoint holding their update is on disk, and the checkpoint lists them
(``pending_acks``). After a crash the trainer resumes from the checkpoint, acks what is
pending, and acks as consumed — without training — any group it leases again that the
checkpoint already contains (``trained``); groups of an update that never reached a
checkpoint were never acked and come back when their lease runs out, to be trained once.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from coda.logging import get_logger

log = get_logger("trainer.checkpoint")

LATEST = "latest"
SHARDED_DIR = "sharded"
"""accelerate's per-process state (FSDP / ZeRO-3 optimizer and model shards), when sharded."""
TRAINED_KEPT = 100_000
"""Group ids remembered as trained (the ledger is bounded)."""


@dataclass
class TrainState:
    """What the trainer must remember across restarts besides the tensors."""

    update: int = 0
    versions: list[str] = field(default_factory=list)
    """Published planner versions, oldest first; ``versions[0]`` is the initial policy."""
    published_update: int = 0
    """The update whose weights ``versions[-1]`` holds (0: the initial policy)."""
    trained: list[str] = field(default_factory=list)
    """Ids of the groups trained on (the most recent :data:`TRAINED_KEPT`)."""
    pending_acks: list[list[str]] = field(default_factory=list)
    """``[group_id, lease_token, status]`` to ack at the master after this checkpoint."""
    counts: dict[str, int] = field(default_factory=dict)
    """Groups consumed / dropped by reason, over the whole run."""

    def remember(self, group_ids: list[str]) -> None:
        self.trained = (self.trained + group_ids)[-TRAINED_KEPT:]

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root``, if any."""
    pointer = Path(root) / LATEST
    if not pointer.is_file():
        return None
    path = Path(root) / pointer.read_text().strip()
    return path if (path / "state.json").is_file() else None


def read_state(path: str | Path) -> TrainState:
    return TrainState(**json.loads((Path(path) / "state.json").read_text()))


def save_checkpoint(root: str | Path, state: TrainState, weights: dict[str, torch.Tensor],
                    optimizer: torch.optim.Optimizer | None, scheduler: Any, *,
                    keep: int = 2, sharded_state: Path | None = None) -> Path:
    """Write checkpoint ``update-<state.update>`` atomically and point ``latest`` at it;
    ``sharded_state`` (accelerate's ``save_state`` directory under FSDP / ZeRO-3) moves in."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"update-{state.update:06d}"
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in weights.items()},
                  str(tmp / "weights.safetensors"))
        if optimizer is not None:  # sharded runs keep it in SHARDED_DIR instead
            torch.save({"optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict() if scheduler is not None else None},
                       tmp / "optimizer.pt")
        torch.save({"torch": torch.get_rng_state()}, tmp / "rng.pt")
        if sharded_state is not None:
            os.rename(sharded_state, tmp / SHARDED_DIR)
        (tmp / "state.json").write_text(json.dumps(asdict(state)))
        target = root / name
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    pointer = root / f".{LATEST}.tmp"
    pointer.write_text(name)
    os.replace(pointer, root / LATEST)
    _prune(root, keep)
    log.info("trainer.checkpoint_saved", path=str(target), update=state.update)
    return target


def update_state(path: str | Path, state: TrainState) -> None:
    """Rewrite the ledger of an existing checkpoint (after acks / a publish), atomically."""
    tmp = Path(path) / ".state.json.tmp"
    tmp.write_text(json.dumps(asdict(state)))
    os.replace(tmp, Path(path) / "state.json")


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    return load_file(str(Path(path) / "weights.safetensors"))


def restore_optimizer(path: str | Path, optimizer: torch.optim.Optimizer, scheduler: Any) -> None:
    blob = torch.load(Path(path) / "optimizer.pt", weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    if scheduler is not None and blob.get("scheduler") is not None:
        scheduler.load_state_dict(blob["scheduler"])
    rng = torch.load(Path(path) / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.glob("update-*") if (p / "state.json").is_file())
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in [*root.glob(".update-*"), *root.glob(".sharded-*")]:  # a crashed save's
        shutil.rmtree(stale, ignore_errors=True)
