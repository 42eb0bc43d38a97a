"""The starting planner: a planner that proposes a mixture of right and wrong next steps, made
by the project's own stage-2 SFT on the curricula's recorded plans.

1. **record**: the curricula's right plans are run as real episodes (the recording planner, the
   frozen executor, the judge, a real desktop) and judged; the master's stage-2 export
   (:func:`trainer.sft.dataset.export_dataset`) turns the judged trajectories into planner turns
   with their real screenshots and histories;
2. **mix**: each turn again with every plan of its step as the target (the right plan, its
   other phrasings and routes of ``also``, the wrong plans), by weight
   (:func:`coda_app.learning.recordings.warm_rows`);
3. **fine-tune**: :func:`trainer.sft.train.train_sft` on a tiny Qwen2.5-VL built for the run
   (its tokenizer trained on the curricula's texts) or on the given model, saved as a model
   directory: the base the run's planner service serves and its trainer adapts.

The result is cached under ``<home>/warm/<key>`` (``key``: the curricula and the settings that
shape the model), so a control run starts from the very same planner.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coda.clients.master import MasterClient
from coda.contracts.master_api import BatchCreate
from coda.contracts.records import JudgeMode
from coda.inference.replay import ReplayScript
from coda.logging import get_logger
from coda_app.learning.curriculum import Curriculum
from coda_app.learning.recordings import corpus, warm_rows
from coda_app.learning.settings import LearnSettings
from coda_app.learning.waiting import wait_batch

log = get_logger("coda_app.learning.warmup")


@dataclass(frozen=True)
class WarmStart:
    model_dir: Path
    info: dict[str, Any]
    """What it was made from: rows, mixture, SFT losses, seconds (``warm.json``)."""


def cache_key(curricula: list[Curriculum], s: LearnSettings) -> str:
    """The curricula's plans and the settings that shape the warm start."""
    parts = [c.model_dump_json() + c.instruction for c in curricula]
    parts.append(json.dumps([s.planner_model, s.vocab_size, s.max_pixels, s.warm_epochs,
                             s.warm_learning_rate, s.warm_full, s.seed]))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cached(home: Path, key: str) -> WarmStart | None:
    folder = home / "warm" / key
    info = folder / "warm.json"
    if not (folder / "model" / "config.json").exists() or not info.exists():
        return None
    return WarmStart(folder / "model", json.loads(info.read_text()))


def write_script(script: ReplayScript, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script.model_dump_json(indent=1, exclude_defaults=True) + "\n")
    return path


async def record(master: MasterClient, curricula: list[Curriculum], out: Path,
                 *, timeout_s: float, alive: Callable[[], bool] | None = None,
                 ) -> tuple[list[dict[str, Any]], uuid.UUID]:
    """Run every curriculum's right plans once (the recording planner must be serving), wait
    for the verdicts, export the judged trajectories; their planner turns. A right trajectory
    that fails its task's checker or the judge stops the run: the curriculum is wrong."""
    from trainer.sft.dataset import ExportFilter, export_dataset, load_rows

    created = await master.create_batch(BatchCreate(
        name=f"learn-record-{uuid.uuid4().hex[:6]}",
        tasks=[c.spec.model_dump(mode="json") for c in curricula if c.spec is not None],
        rollouts=1, judge=JudgeMode.ALWAYS, group_size=0))
    episodes = await wait_batch(master, created.batch.id, created.episode_ids,
                                timeout_s=timeout_s, what="the recording batch", alive=alive)
    bad = [f"{e.task_id}: success={e.success} verdict={e.verdict.correct if e.verdict else None}"
           f" error={e.error}" for e in episodes
           if not e.success or e.verdict is None or not e.verdict.correct]
    if bad:
        raise RuntimeError("the curricula's right plans did not solve their tasks (or the "
                           "recorded judge did not recognise them): " + "; ".join(bad))
    stats = await export_dataset(master, out, ExportFilter(batch_id=str(created.batch.id)))
    rows = list(load_rows(out))
    log.info("learn.recorded", trajectories=stats.trajectories, rows=len(rows), out=str(out))
    return rows, created.batch.id


def build_base(curricula: list[Curriculum], s: LearnSettings, out: Path) -> Path:
    """The model the warm-up fine-tunes: the given planner, or a tiny random Qwen2.5-VL whose
    tokenizer knows the curricula's texts."""
    if s.planner_model:
        return Path(s.planner_model)
    from coda.inference.tiny import build_tiny_qwen25vl

    if out.exists():
        shutil.rmtree(out)
    build_tiny_qwen25vl(out, seed=s.seed, corpus=corpus(curricula), vocab_size=s.vocab_size)
    return out


def fine_tune(rows: list[dict[str, Any]], base: Path, s: LearnSettings, out: Path
              ) -> dict[str, Any]:
    """Stage-2 SFT on ``rows``; the result saved as a model directory at ``out``."""
    from coda.inference.tiny import write_video_processor_config
    from trainer.sft.train import SFTConfig, train_sft

    cfg = SFTConfig(model=str(base), lora=not s.warm_full, lora_targets=s.lora_targets,
                    learning_rate=s.warm_learning_rate, epochs=s.warm_epochs, rows_per_step=4,
                    max_pixels=s.max_pixels, device=s.device, seed=s.seed, publish=False)
    started = time.monotonic()
    last = [0.0]

    def progress(done: int, total: int, loss: float) -> None:
        if done == total or time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            log.info("learn.warm_up", step=done, steps=total, loss=round(loss, 4))

    result, policy = train_sft(cfg, rows, on_step=progress)
    model = policy.model.merge_and_unload() if cfg.lora else policy.model
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    policy.processor.save_pretrained(out)
    write_video_processor_config(out, policy.processor)
    return {"sft_loss_before": round(result.losses[0], 4),
            "sft_loss_after": round(result.losses[-1], 4), "sft_steps": result.steps,
            "sft_s": round(time.monotonic() - started, 1)}


def fine_tune_rows(rows: list[dict[str, Any]], recording_batch: uuid.UUID,
                   curricula: list[Curriculum], s: LearnSettings) -> WarmStart:
    """Mix the recorded rows and fine-tune the run's base on them; cached by key."""
    key = cache_key(curricula, s)
    folder = s.home.resolve() / "warm" / key
    started = time.monotonic()
    mixed = warm_rows(rows, curricula)
    base = build_base(curricula, s, folder / "base")
    info: dict[str, Any] = {"key": key, "recording_batch": str(recording_batch),
                            "recorded_rows": len(rows), "rows": len(mixed), "base": str(base),
                            "mixture": {c.name: [[[p.kind, p.weight] for p in step.plans]
                                                 for step in c.steps] for c in curricula}}
    info.update(fine_tune(mixed, base, s, folder / "model"))
    info["seconds"] = round(time.monotonic() - started, 1)
    (folder / "warm.json").write_text(json.dumps(info, indent=1) + "\n")
    log.info("learn.warm_start", key=key, rows=len(mixed), loss=info["sft_loss_after"],
             seconds=info["seconds"])
    return WarmStart(folder / "model", info)
