"""``coda eval TASKS --k K``: k rollouts of every task through the running system, then the
paper's Table 1 (Average@k and Pass@k per app and overall), printed and written as CSV and
JSON. The episodes' own checkers decide success; no judge or group jobs are made unless asked.
``--versions A --versions B`` runs the tasks once per planner version (batches pinned to each)
and prints them side by side, each with its success rate and 95 % interval.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from coda.clients.master import MasterClient
from coda.contracts.master_api import AppScore, BatchCreate, BatchCreated, VersionRate
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


async def _submit(client: MasterClient, tasks: list[TaskSpec], *, k: int, name: str,
                  judge: JudgeMode, planner_version: str | None = None) -> BatchCreated:
    return await client.create_batch(BatchCreate(
        name=name, tasks=[t.model_dump(mode="json") for t in tasks], rollouts=k,
        judge=judge, group_size=0, planner_version=planner_version))


async def _wait(client: MasterClient, batches: dict[str, uuid.UUID], *, timeout_s: float,
                console: Console, poll_s: float) -> dict[str, Batch]:
    """Until every batch's episodes have finished (a progress bar each)."""
    deadline = time.monotonic() + timeout_s
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[succeeded]} succeeded"), TimeElapsedColumn())
    done: dict[str, Batch] = {}
    with Progress(*columns, console=console, transient=False) as progress:
        bars = {label: progress.add_task(f"eval {label}", total=None, succeeded=0)
                for label in batches}
        while len(done) < len(batches):
            for label, batch_id in batches.items():
                if label in done:
                    continue
                batch = await client.get_batch(batch_id)
                p = batch.progress
                finished = p.completed + p.failed + p.cancelled
                progress.update(bars[label], completed=finished, total=p.total,
                                succeeded=p.succeeded)
                if finished >= p.total:
                    done[label] = batch
            if len(done) == len(batches):
                break
            if time.monotonic() > deadline:
                left = {label: str(b) for label, b in batches.items() if label not in done}
                raise EvalTimeout(f"batches {left} not finished after {timeout_s:g} s (their "
                                  "episodes go on at the master)")
            await asyncio.sleep(poll_s)
    return done


async def run_eval(client: MasterClient, tasks: list[TaskSpec], *, k: int, name: str,
                   judge: JudgeMode, timeout_s: float, console: Console,
                   poll_s: float = 2.0) -> tuple[Batch, list[dict[str, Any]]]:
    created = await _submit(client, tasks, k=k, name=name, judge=judge)
    batch = (await _wait(client, {name: created.batch.id}, timeout_s=timeout_s,
                         console=console, poll_s=poll_s))[name]
    status = await client.status_of(batch.id)
    return batch, table_rows(status.scores)


@dataclass
class VersionEval:
    """One planner version's batch: its Table 1 rows and its overall success rate."""

    version: str
    batch: Batch
    rows: list[dict[str, Any]]
    rate: VersionRate | None


async def run_compare(client: MasterClient, tasks: list[TaskSpec], versions: list[str], *,
                      k: int, name: str, judge: JudgeMode, timeout_s: float, console: Console,
                      poll_s: float = 2.0) -> list[VersionEval]:
    """The same tasks x k rollouts for each planner version (one batch pinned to each, all
    queued at once so they share the fleet's conditions), each batch's Table 1 rows and its
    success rate with the 95 % interval."""
    created = {v: await _submit(client, tasks, k=k, name=f"{name}-{v}", judge=judge,
                                planner_version=v) for v in versions}
    batches = await _wait(client, {v: c.batch.id for v, c in created.items()},
                          timeout_s=timeout_s, console=console, poll_s=poll_s)
    out = []
    for v in versions:
        batch = batches[v]
        rows = table_rows((await client.status_of(batch.id)).scores)
        rates = (await client.batch_versions(batch.id)).items
        out.append(VersionEval(v, batch, rows, rates[0] if rates else None))
    return out


def compare_rows(evals: list[VersionEval]) -> list[dict[str, Any]]:
    """One row per app (then Overall): each version's Average@k side by side (pure)."""
    apps = [r["app"] for r in evals[0].rows] if evals else []
    out = []
    for app in apps:
        row: dict[str, Any] = {"app": app}
        for e in evals:
            match = next((r for r in e.rows if r["app"] == app), None)
            row[e.version] = None if match is None else match["average_at_k"]
        out.append(row)
    return out


def compare_table(evals: list[VersionEval], k: int) -> Table:
    table = Table(title=f"Planner versions side by side (k = {k}; Average@{k} in %)")
    table.add_column("app")
    for e in evals:
        table.add_column(e.version, justify="right")
    if len(evals) == 2:
        table.add_column("difference", justify="right")
    for row in compare_rows(evals):
        values = [row[e.version] for e in evals]
        cells = ["-" if v is None else f"{v:.2f}" for v in values]
        if len(evals) == 2:
            a, b = values
            cells.append("-" if a is None or b is None else f"{b - a:+.2f}")
        table.add_row(row["app"], *cells, style="bold" if row["app"] == "Overall" else None)
    cells = []
    for e in evals:
        r = e.rate
        cells.append("-" if r is None or r.rate is None else
                     f"{100 * r.rate:.0f} % ({100 * r.ci_low:.0f}-{100 * r.ci_high:.0f})")
    table.add_row("success, 95 % interval", *cells, *([""] if len(evals) == 2 else []))
    return table


def write_compare(evals: list[VersionEval], out_dir: Path, *, k: int) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = compare_rows(evals)
    csv_path, json_path = out_dir / "compare.csv", out_dir / "compare.json"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["app", *[e.version for e in evals]],
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    csv_path.write_text(buf.getvalue())
    json_path.write_text(json.dumps({
        "k": k, "rows": rows,
        "versions": [{"version": e.version, "batch_id": str(e.batch.id),
                      "table1": e.rows, "rate": e.rate.model_dump() if e.rate else None}
                     for e in evals]}, indent=2) + "\n")
    return [csv_path, json_path]
