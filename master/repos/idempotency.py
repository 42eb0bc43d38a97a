"""The ``idempotency_keys`` table: what the first request with an ``Idempotency-Key`` answered
(see :mod:`master.idempotency`)."""

from __future__ import annotations

from typing import Any

import asyncpg

from master.db.pg import Conn


async def reserve(conn: asyncpg.Connection, scope: str, key: str,
                  digest: str) -> asyncpg.Record | None:
    """Inside the caller's transaction: take ``key`` for this request (None), or the row of
    the request that took it first (``digest``, ``response``). A request holding the key in a
    transaction not yet committed makes this wait for it: its answer, or the key when it rolls
    back."""
    got = await conn.fetchval(
        "insert into idempotency_keys (scope, key, digest) values ($1, $2, $3) "
        "on conflict (scope, key) do nothing returning key", scope, key, digest)
    if got is not None:
        return None
    return await conn.fetchrow("select digest, response from idempotency_keys "
                               "where scope = $1 and key = $2", scope, key)


async def answer(conn: Conn, scope: str, key: str, response: dict[str, Any]) -> None:
    """Record what the request that took ``key`` answers."""
    await conn.execute("update idempotency_keys set response = $3 where scope = $1 and key = $2",
                       scope, key, response)


async def stored(conn: Conn, scope: str, key: str) -> asyncpg.Record | None:
    """``digest`` and ``response`` of a key, None when no request took it."""
    return await conn.fetchrow("select digest, response from idempotency_keys "
                               "where scope = $1 and key = $2", scope, key)


async def keep(conn: Conn, scope: str, key: str, digest: str,
               response: dict[str, Any]) -> bool:
    """Record a key with its answer outside a transaction; False when it was taken already."""
    got = await conn.fetchval(
        "insert into idempotency_keys (scope, key, digest, response) values ($1, $2, $3, $4) "
        "on conflict (scope, key) do nothing returning key", scope, key, digest, response)
    return got is not None


async def sweep(conn: Conn, older_than_s: float) -> int:
    """Delete the keys taken more than ``older_than_s`` ago (by the database's clock); how
    many."""
    done = await conn.execute("delete from idempotency_keys "
                              "where created_at < now() - make_interval(secs => $1)",
                              float(older_than_s))
    return int(done.split()[-1])
