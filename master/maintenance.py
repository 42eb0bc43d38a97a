"""Background work, done by exactly one replica at a time (a Redis lock with a TTL):
lease expiry every ``maintenance_interval_s`` and queue reconciliation with Postgres every
``reconcile_interval_s`` (at once when Redis lost its data)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

from coda.logging import get_logger
from master import jobs
from master.metrics import refresh_gauges
from master.state import AppState

log = get_logger("coda.master.maintenance")

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


async def tick(core: AppState, *, owner: str, last_reconcile: float) -> float:
    """One round; returns when reconciliation last ran."""
    s = core.settings
    lock_ms = int(max(s.maintenance_interval_s, 1) * 5000)
    got = await core.redis.set(core.queue.k.maintenance_lock, owner, nx=True, px=lock_ms)
    if not got:
        return last_reconcile
    try:
        now = time.monotonic()
        if not await core.queue.is_built() or now - last_reconcile >= s.reconcile_interval_s:
            await jobs.reconcile(core.pg, core.queue, ttl_s=s.lease_ttl_s)
            last_reconcile = now
        await jobs.expire_leases(core.pg, core.queue)
    finally:
        await core.redis.eval(_UNLOCK, 1, core.queue.k.maintenance_lock, owner)
    return last_reconcile


async def run(core: AppState, stop: asyncio.Event) -> None:
    owner = secrets.token_hex(8)
    last_reconcile = 0.0
    last_gauges = 0.0
    while not stop.is_set():
        try:
            last_reconcile = await tick(core, owner=owner, last_reconcile=last_reconcile)
            if time.monotonic() - last_gauges > 5:
                await refresh_gauges(core)
                last_gauges = time.monotonic()
        except Exception as exc:  # keep going: Redis or Postgres may come back
            log.warning("maintenance round failed", error=str(exc), error_type=type(exc).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=core.settings.maintenance_interval_s)
