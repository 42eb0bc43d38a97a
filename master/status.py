"""The data behind the status page (also served as JSON)."""

from __future__ import annotations

import uuid

from coda.contracts.master_api import AppScore, QueueDepth, StatusReport, VersionRate
from coda.contracts.records import JobKind
from coda.scoring import rates_by, table1
from master.dashboard import MAX_LIVE
from master.db.pg import Conn
from master.repos import batches as batch_rows
from master.repos import episodes as episode_rows
from master.repos import groups as group_rows
from master.repos import jobs as job_rows
from master.repos import training as training_rows
from master.repos import versions as version_rows
from master.repos import workers as worker_rows
from master.state import AppState


async def queue_depths(core: AppState) -> list[QueueDepth]:
    counts = await job_rows.active_counts(core.pg)
    return [QueueDepth(kind=k, queued=counts.get((k.value, "queued"), 0),
                       leased=counts.get((k.value, "leased"), 0)) for k in JobKind]


async def version_rates(conn: Conn, batch_id: uuid.UUID | None) -> list[VersionRate]:
    """Success rate per planner version of a batch (or of all batches)."""
    out = []
    for r in rates_by(await episode_rows.version_outcomes(conn, batch_id)):
        low, high = r.interval
        out.append(VersionRate(planner_version=r.key, rollouts=r.rollouts, succeeded=r.succeeded,
                               rate=r.rate, ci_low=round(low, 4), ci_high=round(high, 4)))
    return out


async def report(core: AppState, *, batch_id: uuid.UUID | None = None) -> StatusReport:
    pg = core.pg
    recent_batches, _ = await batch_rows.list_page(pg, limit=20, offset=0)
    if batch_id is None and recent_batches:
        batch_id = recent_batches[0].id
    scores = [AppScore(app=r.app, tasks=r.tasks, rollouts=r.rollouts,
                       average_at_k=r.average_at_k, pass_at_k=r.pass_at_k)
              for r in table1(await episode_rows.outcomes(pg, batch_id))]
    recent, _ = await episode_rows.list_page(pg, batch_id=None, status=None, app=None,
                                             limit=25, offset=0)
    curve = await training_rows.list_metrics(pg, run=None, planner_version=None, limit=500)
    groups, dropped = await group_rows.counts_by_reason(pg)
    return StatusReport(groups=groups, groups_dropped=dropped,
                        verdicts=await episode_rows.verdict_counts(pg),
                        live=await episode_rows.live_slots(pg, MAX_LIVE),
                        planner_version=await version_rows.current_name(pg),
                        judge_rates=await episode_rows.judge_rates(pg),
                        generated_at=core.clock.now(), batches=recent_batches, scores=scores,
                        workers=await worker_rows.list_workers(
                            pg, limit=100, now=core.clock.now(),
                            online_within_s=core.settings.lease_ttl_s),
                        queues=await queue_depths(core), recent_episodes=recent,
                        training=training_rows.summarize(curve), training_curve=curve,
                        coverage=core.coverage,
                        version_rates=await version_rates(pg, batch_id) if batch_id else [],
                        version_rates_all=await version_rates(pg, None),
                        supervised=core.supervised() if core.supervised else [])
