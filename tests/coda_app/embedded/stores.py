"""Helpers of the embedded-server tests: talk to the stores a test started."""

from __future__ import annotations

import asyncpg
import redis

from coda.urls import to_plain_postgres_url
from tests.fixtures.infra import run_async


def url_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


async def _pg_exec(url: str, *sql: str) -> list[list[object]]:
    conn = await asyncpg.connect(to_plain_postgres_url(url))
    try:
        rows = []
        for statement in sql:
            rows = await conn.fetch(statement)
        return [list(r.values()) for r in rows]
    finally:
        await conn.close()


def pg(url: str, *sql: str) -> list[list[object]]:
    return run_async(lambda: _pg_exec(url, *sql))


def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)
