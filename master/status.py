"""The data behind the status page (also served as JSON)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import text

from coda.contracts.master_api import AppScore, QueueDepth, StatusReport
from coda.contracts.records import JobKind
from coda.scoring import table1
from master import batches, dashboard, training, workers
from master.state import AppState


async def queue_depths(core: AppState) -> list[QueueDepth]:
    async with core.engine.connect() as conn:
        rows = (await conn.execute(text(
            "select kind, status, count(*) n from jobs where status in ('queued', 'leased') "
            "group by kind, status"))).all()
    counts = {(r.kind, r.status): r.n for r in rows}
    return [QueueDepth(kind=k, queued=counts.get((k.value, "queued"), 0),
                       leased=counts.get((k.value, "leased"), 0)) for k in JobKind]


async def lifecycle_counts(core: AppState) -> tuple[dict[str, int], dict[str, int],
                                                    dict[str, int]]:
    """Groups by status, dropped groups by reason, judged / correct episodes."""
    async with core.engine.connect() as conn:
        rows = (await conn.execute(text(
            "select status, coalesce(reason, 'acked') reason, count(*) n from groups "
            "group by status, reason"))).all()
        judged = (await conn.execute(text(
            "select count(*) filter (where verdict is not null) judged, count(*) filter "
            "(where (verdict ->> 'correct')::boolean) correct from episodes"))).one()
    groups: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for r in rows:
        groups[r.status] = groups.get(r.status, 0) + r.n
        if r.status == "dropped":
            dropped[r.reason] = dropped.get(r.reason, 0) + r.n
    return groups, dropped, {"judged": judged.judged or 0, "correct": judged.correct or 0}


async def report(core: AppState, *, batch_id: uuid.UUID | None = None) -> StatusReport:
    recent_batches, _ = await batches.list_batches(core.engine, limit=20, offset=0)
    if batch_id is None and recent_batches:
        batch_id = recent_batches[0].id
    scores = [AppScore(app=r.app, tasks=r.tasks, rollouts=r.rollouts,
                       average_at_k=r.average_at_k, pass_at_k=r.pass_at_k)
              for r in table1(await batches.outcomes(core.engine, batch_id))]
    recent, _ = await batches.list_episodes(core.engine, batch_id=None, status=None, app=None,
                                            limit=25, offset=0)
    curve = await training.list_metrics(core.engine, run=None, planner_version=None, limit=500)
    groups, dropped, verdicts = await lifecycle_counts(core)
    async with core.engine.connect() as conn:
        current = (await conn.execute(text(
            "select name from model_versions where role = 'planner' and is_current "
            "limit 1"))).scalar()
    return StatusReport(groups=groups, groups_dropped=dropped, verdicts=verdicts,
                        live=await dashboard.live_slots(core.engine), planner_version=current,
                        judge_rates=await dashboard.judge_rates(core.engine),
                        generated_at=datetime.now(UTC), batches=recent_batches, scores=scores,
                        workers=await workers.list_workers(core.engine, limit=100),
                        queues=await queue_depths(core), recent_episodes=recent,
                        training=training.summarize(curve), training_curve=curve)
