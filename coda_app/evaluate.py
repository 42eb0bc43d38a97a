"""``coda eval TASKS --k K``: k rollouts of every task through the running system, then the
paper's Table 1 (Average@k and Pass@k per app and overall), printed and written as CSV and
JSON. The episodes' own checkers decide success; no judge or group jobs are made unless asked.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from coda.clients.master import MasterClient
from coda.contracts.master_api import AppScore, BatchCreate
from coda.contracts.records import Batch, JudgeMode
from coda.tasks import TaskSpec

FIELDS = ("app", "tasks", "rollouts", "average_at_k", "pass_at_k")


class EvalTimeout(TimeoutError):
    """The batch did not finish in time (its episodes go on at the master)."""


def table_rows(scores: list[AppScore]) -> list[dict[str, Any]]:
    """Table 1 rows, apps first and ``Overall`` last (pure)."""
    rows = [s.model_dump(include=set(FIELDS)) for s in scores]
    return sorted(rows, key=lambda r: (r["app"] == "Overall", r["app"]))


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def write_table(rows: list[dict[str, Any]], out_dir: Path, *, batch: Batch, k: int) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / "table1.csv", out_dir / "table1.json"
    csv_path.write_text(to_csv(rows))
    json_path.write_text(json.dumps({
        "batch_id": str(batch.id), "name": batch.name, "k": k,
        "episodes": batch.progress.total, "completed": batch.progress.completed,
        "failed": batch.progress.failed, "succeeded": batch.progress.succeeded,
        "rows": rows}, indent=2) + "\n")
    return [csv_path, json_path]


def rich_table(rows: list[dict[str, Any]], k: int) -> Table:
    table = Table(title=f"Table 1 (k = {k}; success in %)")
    for name, justify in (("app", "left"), ("tasks", "right"), ("rollouts", "right"),
                          (f"Average@{k}", "right"), (f"Pass@{k}", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        fmt = [("-" if r[f] is None else f"{r[f]:.2f}") for f in ("average_at_k", "pass_at_k")]
        style = "bold" if r["app"] == "Overall" else None
        table.add_row(r["app"], str(r["tasks"]), str(r["rollouts"]), *fmt, style=style)
    return table


async def run_eval(client: MasterClient, tasks: list[TaskSpec], *, k: int, name: str,
                   judge: JudgeMode, timeout_s: float, console: Console,
                   poll_s: float = 2.0) -> tuple[Batch, list[dict[str, Any]]]:
    created = await client.create_batch(BatchCreate(
        name=name, tasks=[t.model_dump(mode="json") for t in tasks], rollouts=k,
        judge=judge, group_size=0))
    batch_id: uuid.UUID = created.batch.id
    total = created.batch.progress.total
    deadline = time.monotonic() + timeout_s
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[succeeded]} succeeded"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task(f"eval {name}", total=total, succeeded=0)
        while True:
            batch = await client.get_batch(batch_id)
            p = batch.progress
            done = p.completed + p.failed + p.cancelled
            progress.update(bar, completed=done, succeeded=p.succeeded)
            if done >= total:
                break
            if time.monotonic() > deadline:
                raise EvalTimeout(f"batch {batch_id}: {done} of {total} episodes finished after "
                                  f"{timeout_s:g} s (they go on at the master)")
            await asyncio.sleep(poll_s)
    status = await client.status_of(batch_id)
    return batch, table_rows(status.scores)
