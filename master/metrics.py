"""Prometheus metrics of the master (request metrics come from coda.service)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import text

if TYPE_CHECKING:
    from master.state import AppState


class MasterMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.jobs_leased = Counter("coda_jobs_leased_total", "jobs handed out", ["kind"],
                                   registry=registry)
        self.jobs_finished = Counter("coda_jobs_finished_total", "jobs ended by workers",
                                     ["kind", "outcome"], registry=registry)
        self.steps = Counter("coda_steps_reported_total", "episode steps stored",
                             registry=registry)
        self.jobs = Gauge("coda_jobs_active", "queued and leased jobs by kind (Postgres)",
                          ["kind", "status"], registry=registry)
        self.workers_alive = Gauge("coda_workers_alive", "workers seen in the last 60 s",
                                   registry=registry)


async def refresh_gauges(core: AppState) -> None:
    m: MasterMetrics | None = getattr(core, "metrics", None)
    if m is None:
        return
    async with core.engine.connect() as conn:
        rows = (await conn.execute(text(
            "select kind, status, count(*) n from jobs where status in ('queued', 'leased') "
            "group by kind, status"))).all()
        alive = (await conn.execute(text(
            "select count(*) from workers where last_heartbeat > now() - interval '60 seconds'"
        ))).scalar()
    for r in rows:
        m.jobs.labels(r.kind, r.status).set(r.n)
    m.workers_alive.set(alive or 0)
