"""Stage-2 data: judged trajectories from the master -> a Hugging Face ``datasets`` dataset of
planner turns with their screenshots, written as parquet.

One row per planner turn (an ``ok`` step with a thought) of an episode whose verdict passes the
filter: what the planner saw (instruction, past turns' texts, the screenshots the planner
prompt keeps) and what it wrote (``target``). Screenshots are fetched through the master's
artifact route and stored in the rows as images (``datasets.Image``), so the dataset is
self-contained. :func:`row_messages` rebuilds the planner's exact conversation from a row with
the one prompt builder (``coda.prompts.planner``).

Load it with :func:`load_rows` or ``datasets.load_dataset("parquet",
data_files=f"{out}/*.parquet")``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.clients.master import MasterClient
from coda.contracts.training import JudgedTrajectory
from coda.inference.images import encode_data_url
from coda.prompts.planner import KEEP_IMAGES, PastStep, build_planner_messages

SHARD = "train-00000-of-00001.parquet"
FEATURES_DOC = {
    "episode_id": "string", "batch_id": "string", "task_id": "string", "app": "string",
    "instruction": "string", "planner_version": "string (may be null)",
    "success": "bool (task checker; may be null)", "verdict_correct": "bool",
    "step_index": "int32", "history_texts": "list of the past turns' planner texts",
    "history_images": "images of the LAST len(history_images) past turns",
    "screenshot": "image the planner saw", "target": "the planner's text at this step",
}


@dataclass(frozen=True)
class ExportFilter:
    """Which trajectories to export (None: any)."""

    apps: list[str] = field(default_factory=list)
    batch_id: str | None = None
    planner_version: str | None = None
    verdict: str = "correct"
    """correct (the successful, default), incorrect or any."""


def features() -> Any:
    from datasets import Features, Image, List, Value

    return Features({
        "episode_id": Value("string"), "batch_id": Value("string"), "task_id": Value("string"),
        "app": Value("string"), "instruction": Value("string"),
        "planner_version": Value("string"), "success": Value("bool"),
        "verdict_correct": Value("bool"), "step_index": Value("int32"),
        "history_texts": List(Value("string")), "history_images": List(Image()),
        "screenshot": Image(), "target": Value("string"),
    })


def trajectory_rows(traj: JudgedTrajectory, images: dict[str, bytes],
                    keep_images: int = KEEP_IMAGES) -> list[dict[str, Any]]:
    """The planner turns of one trajectory (pure; ``images``: artifact key -> bytes)."""
    steps = sorted((s for s in traj.steps if s.get("outcome", "ok") == "ok"
                    and s.get("thought") and s.get("screenshot")), key=lambda s: s["index"])
    rows = []
    for i, step in enumerate(steps):
        past = steps[:i]
        kept = past[len(past) - min(keep_images, len(past)):]
        rows.append({
            "episode_id": str(traj.episode_id), "batch_id": str(traj.batch_id),
            "task_id": traj.task_id, "app": traj.app, "instruction": traj.instruction,
            "planner_version": traj.planner_version, "success": traj.success,
            "verdict_correct": traj.verdict.correct, "step_index": int(step["index"]),
            "history_texts": [p["thought"] for p in past],
            "history_images": [{"bytes": images[p["screenshot"]]} for p in kept],
            "screenshot": {"bytes": images[step["screenshot"]]},
            "target": step["thought"],
        })
    return rows


def needed_keys(traj: JudgedTrajectory) -> set[str]:
    return {s["screenshot"] for s in traj.steps if s.get("screenshot")}


@dataclass
class ExportStats:
    trajectories: int = 0
    rows: int = 0
    apps: dict[str, int] = field(default_factory=dict)
    path: str = ""


async def export_dataset(master: MasterClient, out_dir: str | Path, flt: ExportFilter, *,
                         keep_images: int = KEEP_IMAGES, page: int = 100,
                         progress: Callable[[int, int], Awaitable[None] | None] | None = None,
                         ) -> ExportStats:
    """Page through the master's judged trajectories and write the parquet dataset."""
    from datasets import Dataset

    stats = ExportStats()
    rows: list[dict[str, Any]] = []
    cache: dict[str, bytes] = {}
    for app in flt.apps or [None]:  # type: ignore[list-item]
        offset = 0
        while True:
            found = await master.judged_trajectories(
                app=app, batch_id=flt.batch_id, planner_version=flt.planner_version,  # type: ignore[arg-type]
                verdict=flt.verdict, limit=page, offset=offset)
            for traj in found.items:
                for key in needed_keys(traj) - cache.keys():
                    cache[key] = await master.get_artifact(key)
                new = trajectory_rows(traj, cache, keep_images)
                rows += new
                stats.trajectories += 1
                stats.apps[traj.app] = stats.apps.get(traj.app, 0) + len(new)
            offset += len(found.items)
            if progress is not None:
                done = progress(offset, found.total)
                if done is not None:
                    await done
            if not found.items or offset >= found.total:
                break
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dataset = Dataset.from_list(rows, features=features()) if rows else \
        Dataset.from_dict({k: [] for k in features()}, features=features())
    dataset.to_parquet(str(out / SHARD))
    (out / "README.json").write_text(json.dumps({
        "what": "CODA stage-2 SFT data: one planner turn per row", "columns": FEATURES_DOC,
        "filter": flt.__dict__, "keep_images": keep_images, "rows": len(rows),
        "trajectories": stats.trajectories, "apps": stats.apps}, indent=2))
    stats.rows, stats.path = len(rows), str(out)
    return stats


def load_rows(path: str | Path) -> Any:
    """The exported dataset (``datasets.Dataset``) from a directory or parquet file; images
    stay encoded (``{"bytes": ...}``) so prompts carry the exported bytes unchanged."""
    import pyarrow.parquet as pq
    from datasets import Dataset, Image, List

    p = Path(path)
    files = [str(f) for f in sorted(p.glob("*.parquet"))] if p.is_dir() else [str(p)]
    if not files:
        raise FileNotFoundError(f"no parquet files in {p}")
    table = pq.read_table(files[0]) if len(files) == 1 else pq.ParquetDataset(files).read()
    dataset = Dataset(table)  # the features come back from the parquet schema's metadata
    return dataset.cast_column("screenshot", Image(decode=False)).cast_column(
        "history_images", List(Image(decode=False)))


def _image_url(image: Any) -> str:
    """A data URL for a dataset image (PIL, or the raw ``{"bytes": ...}`` form)."""
    if isinstance(image, dict):
        return encode_data_url(image["bytes"])
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return encode_data_url(buf.getvalue())


def row_messages(row: dict[str, Any], *, max_turns: int = 15, keep_images: int = KEEP_IMAGES,
                 answer_mode: bool = False) -> list[dict[str, Any]]:
    """The planner conversation of a dataset row (the builder the service uses)."""
    texts = list(row["history_texts"])
    images = [_image_url(im) for im in row["history_images"]]
    urls: list[str | None] = [None] * (len(texts) - len(images))
    urls += images
    history = [PastStep(t, u) for t, u in zip(texts, urls, strict=True)]
    return build_planner_messages(row["instruction"], history, _image_url(row["screenshot"]),
                                  answer_mode=answer_mode, max_turns=max_turns,
                                  keep_images=keep_images)
