"""The ``training_metrics`` table: trainer figures per update and planner version."""

from __future__ import annotations

from coda.contracts.training import TrainingMetrics, TrainingMetricsReport, VersionTraining
from master.db.pg import Conn, where


async def record(conn: Conn, report: TrainingMetricsReport) -> None:
    """Store one update's figures; a repeated report of the same (run, update) replaces it."""
    await conn.execute(
        "insert into training_metrics (run, update, planner_version, metrics) "
        "values ($1, $2, $3, $4) on conflict (run, update) do update set "
        "planner_version = excluded.planner_version, metrics = excluded.metrics",
        report.run, report.update, report.planner_version, report.metrics)


async def list_metrics(conn: Conn, *, run: str | None, planner_version: str | None,
                       limit: int) -> list[TrainingMetrics]:
    """The latest ``limit`` updates (optionally of one run / version), oldest first."""
    cond, args = where([("run = {}", run), ("planner_version = {}", planner_version)])
    rows = await conn.fetch(
        "select run, update, planner_version, metrics, created_at from training_metrics "
        f"{cond} order by created_at desc, update desc limit ${len(args) + 1}", *args, limit)
    return [TrainingMetrics(run=r["run"], update=r["update"],
                            planner_version=r["planner_version"], metrics=r["metrics"],
                            created_at=r["created_at"]) for r in reversed(rows)]


def summarize(items: list[TrainingMetrics]) -> list[VersionTraining]:
    """Per (run, planner version): number of updates, mean and last figures (pure)."""
    by_key: dict[tuple[str, str], list[TrainingMetrics]] = {}
    for m in items:
        by_key.setdefault((m.run, m.planner_version), []).append(m)
    out = []
    for (run, version), rows in by_key.items():
        rows.sort(key=lambda m: m.update)
        names = sorted({k for m in rows for k in m.metrics})
        means = {k: sum(m.metrics[k] for m in rows if k in m.metrics)
                 / sum(1 for m in rows if k in m.metrics) for k in names}
        out.append(VersionTraining(planner_version=version, run=run, updates=len(rows),
                                   first_update=rows[0].update, last_update=rows[-1].update,
                                   means=means, last=dict(rows[-1].metrics)))
    out.sort(key=lambda v: (v.run, v.first_update))
    return out
