"""Background work, done by exactly one replica at a time (a Redis lock with a TTL):
lease expiry every ``maintenance_interval_s``, queue reconciliation with Postgres every
``reconcile_interval_s`` (at once when Redis lost its data) and, once a minute, the deletion of
idempotency keys older than ``idempotency_ttl_s``."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time

from coda.logging import get_logger
from master import jobs, tokens
from master.metrics import refresh_gauges
from master.repos import idempotency
from master.state import AppState

log = get_logger("coda.master.maintenance")
GAUGE_INTERVAL_S = 15.0
SWEEP_INTERVAL_S = 60.0

_UNLOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


async def tick(core: AppState, *, owner: str) -> None:
    """One round: expire leases; once per reconcile interval (across all replicas) check the
    queue against Postgres, and rebuild what differs; at once when Redis lost its data."""
    s = core.settings
    lock_ms = int(max(s.maintenance_interval_s, 1) * 5000)
    got = await core.redis.set(core.queue.k.maintenance_lock, owner, nx=True, px=lock_ms)
    if not got:
        return
    try:
        lost = not await core.queue.is_built()
        due = await core.redis.set(core.queue.k.reconciled, owner, nx=True,
                                   px=int(s.reconcile_interval_s * 1000))
        if lost or (due and not await jobs.queue_agrees(core.pg, core.queue)):
            await jobs.reconcile(core.pg, core.queue, core.clock, ttl_s=s.lease_ttl_s)
        await jobs.expire_leases(core.pg, core.queue, core.clock)
        if await core.redis.set(core.queue.k.keys_swept, owner, nx=True,
                                px=int(SWEEP_INTERVAL_S * 1000)):
            swept = await idempotency.sweep(core.pg, s.idempotency_ttl_s)
            if swept:
                log.info("maintenance.idempotency_keys_swept", keys=swept)
    finally:
        await core.redis.eval(_UNLOCK, 1, core.queue.k.maintenance_lock, owner)


async def run(core: AppState, stop: asyncio.Event) -> None:
    owner = secrets.token_hex(8)
    last_gauges = 0.0
    while not stop.is_set():
        try:
            # every process: revocations made by another one
            await tokens.load_revocations(core.pg, core.auth)
            await tick(core, owner=owner)
            if time.monotonic() - last_gauges > GAUGE_INTERVAL_S:
                if core.metrics is not None:
                    await refresh_gauges(core.metrics, core.pg, now=core.clock.now())
                last_gauges = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the loop's top: logged, the next round retries
            log.warning("maintenance.round_failed", error=str(exc), error_type=type(exc).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=core.settings.maintenance_interval_s)
