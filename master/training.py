"""Trainer figures per update and planner version; judge verdicts of episodes; judged
trajectories for the stage-2 SFT export."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from coda.contracts.training import (
    JudgedTrajectory,
    TrainingMetrics,
    TrainingMetricsReport,
    Verdict,
    VersionTraining,
)


async def record(engine: AsyncEngine, report: TrainingMetricsReport) -> None:
    """Store one update's figures; a repeated report of the same (run, update) replaces it."""
    async with engine.begin() as conn:
        await conn.execute(text(
            "insert into training_metrics (run, update, planner_version, metrics) "
            "values (:r, :u, :v, :m) on conflict (run, update) do update set "
            "planner_version = excluded.planner_version, metrics = excluded.metrics"
        ).bindparams(bindparam("m", type_=JSONB)), {
            "r": report.run, "u": report.update, "v": report.planner_version,
            "m": report.metrics})


async def list_metrics(engine: AsyncEngine, *, run: str | None, planner_version: str | None,
                       limit: int) -> list[TrainingMetrics]:
    """The latest ``limit`` updates (optionally of one run / version), oldest first."""
    conds: list[str] = []
    params: dict[str, Any] = {"lim": limit}
    for col, val in (("run", run), ("planner_version", planner_version)):
        if val is not None:
            conds.append(f"{col} = :{col}")
            params[col] = val
    where = ("where " + " and ".join(conds)) if conds else ""
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select run, update, planner_version, metrics, created_at from training_metrics "
            f"{where} order by created_at desc, update desc limit :lim"), params)).all()
    return [TrainingMetrics(run=r.run, update=r.update, planner_version=r.planner_version,
                            metrics=r.metrics, created_at=r.created_at) for r in reversed(rows)]


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


async def judged_trajectories(
    engine: AsyncEngine, *, app: str | None, batch_id: uuid.UUID | None,
    planner_version: str | None, correct: bool | None, limit: int, offset: int,
) -> tuple[list[JudgedTrajectory], int]:
    """Completed episodes with a verdict (``correct`` filters on it), steps of the attempt that
    finished, oldest first."""
    conds = ["e.status = 'completed'", "e.verdict is not null"]
    params: dict[str, Any] = {"lim": limit, "off": offset}
    for col, val in (("app", app), ("batch_id", batch_id), ("planner_version", planner_version)):
        if val is not None:
            conds.append(f"e.{col} = :{col}")
            params[col] = val
    if correct is not None:
        conds.append("(e.verdict ->> 'correct')::boolean = :correct")
        params["correct"] = correct
    where = " and ".join(conds)
    async with engine.connect() as conn:
        total = (await conn.execute(text(f"select count(*) from episodes e where {where}"),
                                    params)).scalar()
        rows = (await conn.execute(text(
            "select e.id, e.batch_id, e.task_id, e.app, e.planner_version, e.success, "
            "e.verdict, e.attempts, t.spec ->> 'instruction' as instruction "
            f"from episodes e join tasks t on t.id = e.task_row_id where {where} "
            "order by e.finished_at nulls last, e.id limit :lim offset :off"), params)).all()
        out = []
        for r in rows:
            steps = (await conn.execute(text(
                "select body from steps where episode_id = :id and attempt = "
                "(select max(attempt) from steps where episode_id = :id) order by idx"),
                {"id": r.id})).all()
            out.append(JudgedTrajectory(
                episode_id=r.id, batch_id=r.batch_id, task_id=r.task_id, app=r.app,
                instruction=r.instruction or "", planner_version=r.planner_version,
                success=r.success, verdict=Verdict.model_validate(r.verdict),
                steps=[s.body for s in steps]))
    return out, int(total or 0)
