"""Training groups: created from group jobs (or directly), leased by the trainer, acknowledged."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from coda.contracts.training import Group, GroupRecord, GroupStatus
from master.jobs import LeaseLost, new_token


async def insert_group_pg(conn: asyncpg.Connection | asyncpg.Pool, group: Group) -> uuid.UUID:
    """Store a ready group through the asyncpg pool or a connection."""
    gid = uuid.uuid4()
    await conn.execute(
        "insert into groups (id, status, planner_version, body) values ($1, 'ready', $2, $3)",
        gid, group.planner_version, group.model_dump(mode="json"))
    return gid


async def create(pg: asyncpg.Pool, group: Group) -> uuid.UUID:
    return await insert_group_pg(pg, group)


def _record(r: Any) -> GroupRecord:
    return GroupRecord(id=r.id, status=GroupStatus(r.status), group=Group.model_validate(r.body),
                       created_at=r.created_at, lease_token=r.lease_token,
                       lease_expires_at=r.lease_expires_at)


async def lease(engine: AsyncEngine, *, max_groups: int, ttl_s: float,
                versions: list[str] | None) -> list[GroupRecord]:
    """Oldest ready groups first (and leases that ran out); SKIP LOCKED between trainers."""
    expires = datetime.now(UTC) + timedelta(seconds=ttl_s)
    token = new_token()
    version_filter = "and planner_version = any(:versions)" if versions is not None else ""
    sql = text(
        "update groups set status = 'leased', lease_token = :token, lease_expires_at = :exp "
        "where id in (select id from groups where (status = 'ready' or (status = 'leased' "
        f"and lease_expires_at < now())) {version_filter} order by created_at "
        "limit :n for update skip locked) "
        "returning id, status, body, created_at, lease_token, lease_expires_at")
    params: dict[str, Any] = {"token": token, "exp": expires, "n": max_groups}
    if versions is not None:
        params["versions"] = versions
    async with engine.begin() as conn:
        rows = (await conn.execute(sql, params)).all()
    return sorted((_record(r) for r in rows), key=lambda g: g.created_at)


async def ack(engine: AsyncEngine, *, group_id: uuid.UUID, token: str, status: GroupStatus) -> None:
    """Consumed or dropped (the request model admits no other status)."""
    async with engine.begin() as conn:
        row = (await conn.execute(text(
            "update groups set status = :s, lease_token = null where id = :id "
            "and lease_token = :t and status = 'leased' returning id"),
            {"s": status.value, "id": group_id, "t": token})).first()
        if row is None:
            cur = (await conn.execute(text("select status from groups where id = :id"),
                                      {"id": group_id})).first()
            raise LeaseLost(group_id, cur.status if cur else None)


async def count_by_status(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select status, count(*) n from groups group by status"))).all()
    return {r.status: r.n for r in rows}
