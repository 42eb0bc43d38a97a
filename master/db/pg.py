"""A raw asyncpg pool for the queue's hot path (see master.jobs), JSON(B) as Python objects."""

from __future__ import annotations

import json
from typing import Any

import asyncpg


def plain_url(url: str) -> str:
    """``postgresql+asyncpg://...`` (SQLAlchemy) -> ``postgresql://...`` (asyncpg)."""
    scheme, sep, rest = url.partition("://")
    return f"postgresql{sep}{rest}" if scheme.startswith("postgres") else url


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


async def _init(conn: asyncpg.Connection) -> None:
    for typename in ("jsonb", "json"):
        await conn.set_type_codec(typename, encoder=_dumps, decoder=json.loads,
                                  schema="pg_catalog")


async def _release(conn: asyncpg.Connection) -> None:
    """On release, only close a transaction left open. asyncpg's default reset (RESET ALL,
    UNLISTEN, advisory unlock: one more round trip per query) is not needed: the queue keeps
    no session state."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def make_pool(url: str, *, size: int) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(plain_url(url), min_size=min(2, size), max_size=size,
                                     init=_init, reset=_release,
                                     max_inactive_connection_lifetime=60)
    assert pool is not None
    return pool
