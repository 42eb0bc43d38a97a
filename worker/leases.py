"""The leases a worker holds, kept by one batched heartbeat call per period for all of them
(``POST /v1/jobs/heartbeat``): a VM server with 8 slots makes one call every
``heartbeat_interval_s``, not 8. A lease the master answers ``lost`` stops its job."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.jobs import Job
from coda.contracts.master_api import HEARTBEAT_BATCH_MAX
from coda.logging import get_logger

log = get_logger("worker.leases")


class LeaseGone(RuntimeError):
    """The master no longer holds this job for us (expired, requeued, cancelled)."""


class StepRefused(LeaseGone):
    """The master refused a step report this lease does not allow (another attempt, a job
    without steps, a label only the master sets): it takes no step of this attempt, so the
    attempt stops as for a lost lease."""


@dataclass
class Held:
    job: Job
    work: asyncio.Task[Any]
    lost: asyncio.Event = field(default_factory=asyncio.Event)


class LeaseKeeper:
    """``lost = keeper.hold(job, work)`` while the job runs, ``keeper.drop(job.id)`` after;
    ``await keeper.run()`` heartbeats them all every ``interval_s``."""

    def __init__(self, master: MasterClient, interval_s: float,
                 batch_max: int = HEARTBEAT_BATCH_MAX) -> None:
        self.master = master
        self.interval_s = interval_s
        self.batch_max = max(1, min(batch_max, HEARTBEAT_BATCH_MAX))
        self.held: dict[uuid.UUID, Held] = {}

    def hold(self, job: Job, work: asyncio.Task[Any]) -> asyncio.Event:
        """Keep ``job``'s lease from the next beat on; the event is set (and ``work``
        cancelled) when the master says the lease is lost."""
        held = self.held[job.id] = Held(job, work)
        return held.lost

    def drop(self, job_id: uuid.UUID) -> None:
        self.held.pop(job_id, None)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.beat()

    async def beat(self) -> int:
        """One heartbeat of every lease held now (one call per ``batch_max`` leases); the
        number found lost. A call that fails is logged and retried at the next beat (the
        client has already retried what is transient, honouring ``Retry-After``)."""
        now = list(self.held.values())
        lost = 0
        for lo in range(0, len(now), self.batch_max):
            chunk = now[lo:lo + self.batch_max]
            try:
                got = await self.master.heartbeat_leases([h.job for h in chunk])
            except (ServiceError, httpx.TransportError) as exc:
                log.warning("job.heartbeat_failed", jobs=len(chunk), error=str(exc))
                continue
            for held, beat in zip(chunk, got.leases, strict=False):
                if beat.outcome == "lost" and self.held.get(held.job.id) is held:
                    lost += 1
                    log.warning("job.lease_lost_on_heartbeat", job=str(held.job.id),
                                status=beat.status)
                    held.lost.set()
                    held.work.cancel()
        return lost
