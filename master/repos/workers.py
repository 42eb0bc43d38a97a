"""The ``workers`` table: register and heartbeat (last seen shown on the status page)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import asyncpg

from coda.contracts.desktop import ProviderState
from coda.contracts.master_api import WorkerRegister
from coda.contracts.records import JobKind, Worker
from master.db.pg import Conn
from master.errors import WorkerNotFound

_COLS = "id, name, host, slots, kinds, registered_at, last_heartbeat, busy_slots, provider"


def _worker(r: asyncpg.Record) -> Worker:
    kinds = r["kinds"]
    provider = r["provider"]
    return Worker(id=r["id"], name=r["name"], host=r["host"], slots=r["slots"],
                  kinds=[JobKind(k) for k in kinds.get("kinds", [])],
                  apps=kinds.get("apps", []), registered_at=r["registered_at"],
                  last_heartbeat=r["last_heartbeat"], busy_slots=r["busy_slots"],
                  provider=ProviderState.model_validate(provider) if provider else None)


async def register(conn: Conn, spec: WorkerRegister, *, now: datetime,
                   token_fingerprint: str | None = None) -> Worker:
    row = await conn.fetchrow(
        "insert into workers (id, name, host, slots, kinds, last_heartbeat, token_fingerprint) "
        f"values ($1, $2, $3, $4, $5, $6, $7) returning {_COLS}",
        uuid.uuid4(), spec.name, spec.host, spec.slots,
        {"kinds": [k.value for k in spec.kinds], "apps": spec.apps}, now, token_fingerprint)
    return _worker(row)


async def heartbeat(conn: Conn, worker_id: uuid.UUID, *, busy_slots: int, now: datetime,
                    provider: ProviderState | None = None) -> Worker:
    row = await conn.fetchrow(
        "update workers set last_heartbeat = $3, busy_slots = least($2, slots), provider = $4 "
        f"where id = $1 returning {_COLS}", worker_id, busy_slots, now,
        provider.model_dump(mode="json") if provider is not None else None)
    if row is None:
        raise WorkerNotFound(str(worker_id))
    return _worker(row)


async def exists(conn: Conn, worker_id: uuid.UUID) -> bool:
    return await conn.fetchval("select 1 from workers where id = $1", worker_id) is not None


async def by_token(conn: Conn) -> dict[str, list[uuid.UUID]]:
    """Registered workers by the fingerprint of the token they registered with."""
    rows = await conn.fetch("select id, token_fingerprint from workers "
                            "where token_fingerprint is not null order by registered_at")
    out: dict[str, list[uuid.UUID]] = {}
    for r in rows:
        out.setdefault(r["token_fingerprint"], []).append(r["id"])
    return out


async def of_token(conn: Conn, fingerprint: str) -> list[uuid.UUID]:
    """The workers registered with the token of ``fingerprint``."""
    rows = await conn.fetch("select id from workers where token_fingerprint = $1", fingerprint)
    return [r["id"] for r in rows]


async def list_workers(conn: Conn, limit: int = 200, *, now: datetime | None = None,
                       online_within_s: float | None = None) -> list[Worker]:
    """Most recently seen first; with ``now`` and ``online_within_s`` each says if it is online
    (a heartbeat at most that old)."""
    rows = await conn.fetch(
        f"select {_COLS} from workers order by last_heartbeat desc nulls last limit $1", limit)
    found = [_worker(r) for r in rows]
    if now is None or online_within_s is None:
        return found
    since = now - timedelta(seconds=online_within_s)
    for w in found:
        w.online = w.last_heartbeat is not None and w.last_heartbeat > since
    return found


async def alive(conn: Conn, *, now: datetime, within_s: float) -> int:
    """Workers whose last heartbeat is at most ``within_s`` old."""
    return int(await conn.fetchval("select count(*) from workers where last_heartbeat > $1",
                                   now - timedelta(seconds=within_s)) or 0)
