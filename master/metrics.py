"""Prometheus metrics of the master (request metrics come from coda.service)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge

from master.repos import jobs as job_rows
from master.repos import workers as worker_rows

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
        self.lease_polls = Gauge("coda_lease_polls_waiting",
                                 "lease requests long-polling for work now (this process)",
                                 registry=registry)


async def refresh_gauges(core: AppState) -> None:
    m: MasterMetrics | None = getattr(core, "metrics", None)
    if m is None:
        return
    for (kind, status), n in (await job_rows.active_counts(core.pg)).items():
        m.jobs.labels(kind, status).set(n)
    m.workers_alive.set(await worker_rows.alive(core.pg, now=core.clock.now(), within_s=60))
