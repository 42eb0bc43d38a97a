"""The ``groups`` table: training groups created from group jobs (or directly), leased by the
trainer, acknowledged."""

from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from coda.contracts.training import Group, GroupRecord, GroupStatus
from master.db.pg import Conn
from master.errors import LeaseLost
from master.repos.jobs import new_token


async def insert(conn: Conn, group: Group, *, status: GroupStatus = GroupStatus.READY,
                 reason: str | None = None, source: str | None = None) -> uuid.UUID | None:
    """Store a group; None when a group of the same source step exists."""
    return await conn.fetchval(
        "insert into groups (id, status, planner_version, body, reason, source) "
        "values ($1, $2, $3, $4, $5, $6) on conflict (source) do nothing returning id",
        uuid.uuid4(), status.value, group.planner_version, group.model_dump(mode="json"),
        reason, source)


def _record(r: asyncpg.Record) -> GroupRecord:
    return GroupRecord(id=r["id"], status=GroupStatus(r["status"]),
                       group=Group.model_validate(r["body"]), created_at=r["created_at"],
                       lease_token=r["lease_token"], lease_expires_at=r["lease_expires_at"])


async def lease(conn: Conn, *, max_groups: int, now: datetime, expires: datetime,
                versions: list[str] | None) -> list[GroupRecord]:
    """Oldest ready groups first (and leases that ran out by ``now``); SKIP LOCKED between
    trainers."""
    rows = await conn.fetch(
        "update groups set status = 'leased', lease_token = $1, lease_expires_at = $2 "
        "where id in (select id from groups where (status = 'ready' or (status = 'leased' "
        "and lease_expires_at < $3)) and ($5::text[] is null or planner_version = any($5)) "
        "order by created_at limit $4 for update skip locked) "
        "returning id, status, body, created_at, lease_token, lease_expires_at",
        new_token(), expires, now, max_groups, versions)
    return sorted((_record(r) for r in rows), key=lambda g: g.created_at)


async def leased_with(conn: Conn, ids: list[uuid.UUID], token: str) -> list[GroupRecord]:
    """The ones of ``ids`` still leased with ``token`` (a retried lease gets them again)."""
    rows = await conn.fetch(
        "select id, status, body, created_at, lease_token, lease_expires_at from groups "
        "where id = any($1::uuid[]) and lease_token = $2 and status = 'leased'", ids, token)
    return sorted((_record(r) for r in rows), key=lambda g: g.created_at)


async def ack(conn: Conn, *, group_id: uuid.UUID, token: str, status: GroupStatus) -> None:
    """Consumed or dropped (the request model admits no other status)."""
    got = await conn.fetchval(
        "update groups set status = $1, lease_token = null where id = $2 "
        "and lease_token = $3 and status = 'leased' returning id",
        status.value, group_id, token)
    if got is None:
        cur = await conn.fetchval("select status from groups where id = $1", group_id)
        raise LeaseLost(group_id, cur)


async def count_by_status(conn: Conn) -> dict[str, int]:
    rows = await conn.fetch("select status, count(*) n from groups group by status")
    return {r["status"]: r["n"] for r in rows}


async def counts_by_reason(conn: Conn) -> tuple[dict[str, int], dict[str, int]]:
    """Groups by status, and dropped groups by reason."""
    rows = await conn.fetch("select status, coalesce(reason, 'acked') reason, count(*) n "
                            "from groups group by status, reason")
    groups: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for r in rows:
        groups[r["status"]] = groups.get(r["status"], 0) + r["n"]
        if r["status"] == "dropped":
            dropped[r["reason"]] = dropped.get(r["reason"], 0) + r["n"]
    return groups, dropped


async def rewards_of_episode(conn: Conn, episode_id: uuid.UUID) -> list[asyncpg.Record]:
    """status, reason, idx, n, mean, mx of the groups sampled at the episode's steps (the
    index read as numeric: no stored number can overflow the read)."""
    return list(await conn.fetch(
        "select status, reason, (body -> 'state' ->> 'step_index')::numeric idx, "
        "(select count(*) from jsonb_array_elements(body -> 'candidates')) n, "
        "(select avg((c ->> 'reward')::float) from jsonb_array_elements("
        "body -> 'candidates') c) mean, (select max((c ->> 'reward')::float) from "
        "jsonb_array_elements(body -> 'candidates') c) mx from groups "
        "where body -> 'state' ->> 'episode_id' = $1 order by idx", str(episode_id)))
