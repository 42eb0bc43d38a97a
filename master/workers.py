"""Worker registry: register and heartbeat (last seen shown on the status page)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from coda.contracts.master_api import WorkerRegister
from coda.contracts.records import JobKind, Worker


class WorkerNotFound(Exception):
    pass


def _worker(r: Any) -> Worker:
    return Worker(id=r.id, name=r.name, host=r.host, slots=r.slots,
                  kinds=[JobKind(k) for k in r.kinds.get("kinds", [])],
                  apps=r.kinds.get("apps", []), registered_at=r.registered_at,
                  last_heartbeat=r.last_heartbeat, busy_slots=r.busy_slots)


async def register(engine: AsyncEngine, spec: WorkerRegister) -> Worker:
    async with engine.begin() as conn:
        row = (await conn.execute(text(
            "insert into workers (id, name, host, slots, kinds, last_heartbeat) "
            "values (:id, :name, :host, :slots, :kinds, now()) returning *"
        ).bindparams(bindparam("kinds", type_=JSONB)), {
            "id": uuid.uuid4(), "name": spec.name, "host": spec.host, "slots": spec.slots,
            "kinds": {"kinds": [k.value for k in spec.kinds], "apps": spec.apps}})).one()
    return _worker(row)


async def heartbeat(engine: AsyncEngine, worker_id: uuid.UUID, *, busy_slots: int) -> Worker:
    async with engine.begin() as conn:
        row = (await conn.execute(text(
            "update workers set last_heartbeat = now(), busy_slots = least(:busy, slots) "
            "where id = :id returning *"), {"id": worker_id, "busy": busy_slots})).first()
    if row is None:
        raise WorkerNotFound(str(worker_id))
    return _worker(row)


async def exists(engine: AsyncEngine, worker_id: uuid.UUID) -> bool:
    async with engine.connect() as conn:
        return (await conn.execute(text("select 1 from workers where id = :id"),
                                   {"id": worker_id})).first() is not None


async def list_workers(engine: AsyncEngine, limit: int = 200) -> list[Worker]:
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select * from workers order by last_heartbeat desc nulls last limit :n"),
            {"n": limit})).all()
    return [_worker(r) for r in rows]
