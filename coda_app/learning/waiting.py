"""Waiting on the master: a batch's episodes and the judge and group jobs that follow them."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

from coda.clients.master import MasterClient
from coda.contracts.records import Episode, JobKind
from coda.logging import get_logger

log = get_logger("coda_app.learning")

POLL_S = 1.0
PROGRESS_S = 15.0


class LoopTimeout(TimeoutError):
    """Something the run waited on did not happen in time."""


async def followups_pending(master: MasterClient) -> int:
    """Judge and group jobs queued or running (all batches)."""
    status = await master.status()
    return sum(q.queued + q.leased for q in status.queues if q.kind is not JobKind.EPISODE)


async def wait_batch(master: MasterClient, batch_id: uuid.UUID, episode_ids: list[uuid.UUID],
                     *, timeout_s: float, what: str,
                     alive: Callable[[], bool] | None = None) -> list[Episode]:
    """Until every episode of the batch has ended and no judge or group job is left, then the
    episodes with their steps and verdicts. A judge job is created with the episode that ends,
    and the group jobs with the verdict, so an empty follow-up queue after the last episode
    means every follow-up of the batch is done (the run keeps one batch going at a time)."""
    started = time.monotonic()
    shown = started
    while True:
        batch = await master.get_batch(batch_id)
        p = batch.progress
        pending = None
        if p.queued == 0 and p.running == 0:
            pending = await followups_pending(master)
            if pending == 0:
                break
        now = time.monotonic()
        if now - started > timeout_s:
            raise LoopTimeout(f"{what}: not done after {timeout_s:.0f} s ({p.model_dump()}, "
                              f"follow-up jobs pending: {pending})")
        if alive is not None and not alive():
            raise RuntimeError(f"{what}: the worker exited (its log is in the run's logs/)")
        if now - shown > PROGRESS_S:
            shown = now
            log.info("learn.waiting", what=what, done=p.completed + p.failed + p.cancelled,
                     total=p.total, succeeded=p.succeeded, running=p.running,
                     followups=pending, seconds=round(now - started))
        await asyncio.sleep(POLL_S)
    return [await master.get_episode(e, steps=True) for e in episode_ids]
