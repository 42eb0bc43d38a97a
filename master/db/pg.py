"""The master's one query layer: a raw asyncpg pool (``$1`` parameters, JSON(B) as Python
objects). The repositories in :mod:`master.repos` query through it, and no other module of
the master holds SQL (``tests/test_conventions.py``); SQLAlchemy only describes the tables
(:mod:`master.db.models`) for Alembic."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, TypeAlias

import asyncpg

from coda.urls import to_plain_postgres_url

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool
"""Anything that runs a query: the pool (autocommit) or a connection (maybe in a transaction)."""


def dumps(value: Any) -> str:
    """Compact JSON, as the pool stores JSON(B)."""
    return json.dumps(value, separators=(",", ":"))


async def _init(conn: asyncpg.Connection) -> None:
    for typename in ("jsonb", "json"):
        await conn.set_type_codec(typename, encoder=dumps, decoder=json.loads,
                                  schema="pg_catalog")


async def _release(conn: asyncpg.Connection) -> None:
    """On release, only close a transaction left open. asyncpg's default reset (RESET ALL,
    UNLISTEN, advisory unlock: one more round trip per query) is not needed: the queue keeps
    no session state."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def make_pool(url: str, *, size: int) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(to_plain_postgres_url(url), min_size=min(2, size),
                                     max_size=size, init=_init, reset=_release,
                                     max_inactive_connection_lifetime=60)
    assert pool is not None
    return pool


async def ping(conn: Conn) -> None:
    """One round trip: the database answers (readiness)."""
    await conn.fetchval("select 1")


def where(filters: Iterable[tuple[str, Any]], *, start: int = 1) -> tuple[str, list[Any]]:
    """``where a = $1 and b = $2`` from ``("a = {}", value)`` pairs whose value is not None
    (each ``{}`` becomes the next parameter, numbered from ``start``), and its parameters."""
    conds: list[str] = []
    args: list[Any] = []
    for sql, value in filters:
        if value is None:
            continue
        if "{}" in sql:
            args.append(value)
            sql = sql.format(f"${start + len(args) - 1}")
        conds.append(sql)
    return ("where " + " and ".join(conds)) if conds else "", args


async def page(conn: Conn, select: str, source: str, filters: Iterable[tuple[str, Any]], *,
               order: str, limit: int, offset: int) -> tuple[list[asyncpg.Record], int]:
    """One page of ``select <select> from <source> <where> order by <order>`` and the count of
    all matching rows (the one count query of every paged list)."""
    cond, args = where(filters)
    total = await conn.fetchval(f"select count(*) from {source} {cond}", *args)
    n = len(args)
    rows = await conn.fetch(f"select {select} from {source} {cond} order by {order} "
                            f"limit ${n + 1} offset ${n + 2}", *args, limit, offset)
    return list(rows), int(total or 0)
