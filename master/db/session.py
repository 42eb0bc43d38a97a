"""Async engine and sessions."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

_IDLE_SINCE = "coda_idle_since"


def make_engine(url: str, *, pool_size: int = 20, ping_idle_s: float = 1.0) -> AsyncEngine:
    """A pooled engine that pings a connection on checkout only when it sat idle in the pool for
    more than ``ping_idle_s`` (a stale connection after a Postgres restart is replaced, as with
    ``pool_pre_ping``, without a ping round trip on every checkout of a busy pool)."""
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size)
    dialect = engine.sync_engine.dialect

    @event.listens_for(engine.sync_engine.pool, "checkin")
    def _idle(dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine.sync_engine.pool, "checkout")
    def _ping(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop(_IDLE_SINCE, None)
        if since is None or time.monotonic() - since <= ping_idle_s:
            return
        try:
            dialect.do_ping(dbapi_conn)
        except Exception as error:  # the pool retries with a fresh connection
            raise exc.InvalidatePoolError() from error

    return engine


def autocommit(engine: AsyncEngine) -> AsyncEngine:
    """The same pool in autocommit mode: one round trip per statement, no BEGIN/COMMIT (use it
    for single statements, which Postgres runs atomically anyway)."""
    cached = engine.sync_engine.__dict__.get("_coda_autocommit")
    if cached is None:
        cached = engine.execution_options(isolation_level="AUTOCOMMIT")
        engine.sync_engine.__dict__["_coda_autocommit"] = cached
    return cached


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker:
    return async_sessionmaker(engine, expire_on_commit=False)
