"""Prometheus metrics of the master (request metrics come from coda.service)."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge

from master.db.pg import Conn
from master.repos import jobs as job_rows
from master.repos import workers as worker_rows


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


async def refresh_gauges(m: MasterMetrics, pg: Conn, *, now: datetime) -> None:
    """The gauges read from Postgres: active jobs by kind and status, workers alive at ``now``."""
    for (kind, status), n in (await job_rows.active_counts(pg)).items():
        m.jobs.labels(kind, status).set(n)
    m.workers_alive.set(await worker_rows.alive(pg, now=now, within_s=60))
