"""Training groups for decoupled GRPO."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Response

from coda.contracts.master_api import (
    GroupAck,
    GroupCreate,
    GroupCreated,
    GroupLeaseRequest,
    GroupList,
)
from coda.service import error_responses
from master import idempotency
from master.auth import Reader, WorkerAuth
from master.idempotency import IdempotencyKey
from master.repos import groups
from master.state import State

router = APIRouter(prefix="/v1/groups", tags=["groups"])


@router.post("", status_code=201)
async def create_group(body: GroupCreate, core: State, _: WorkerAuth) -> GroupCreated:
    """Store a ready group (G candidates with rewards at one labelled state)."""
    gid = await groups.insert(core.pg, body.group)
    assert gid is not None  # no source: never a conflict
    return GroupCreated(id=gid)


@router.post("/lease")
async def lease_groups(body: GroupLeaseRequest, core: State, _: WorkerAuth, response: Response,
                       key: IdempotencyKey = None) -> GroupList:
    """Lease the oldest ready groups, optionally only from some planner versions. A retry
    with the same ``Idempotency-Key`` gets the groups the first request leased (those still
    leased with its token), not a second lease."""
    now = core.clock.now()
    async with core.pg.acquire() as conn, conn.transaction():
        if key is not None:
            earlier = await idempotency.reserve(conn, "groups.lease", key,
                                                idempotency.digest(body.model_dump(mode="json")))
            if earlier is not None:
                idempotency.replayed(response)
                return GroupList(items=await groups.leased_with(
                    conn, [uuid.UUID(i) for i in earlier["ids"]], earlier["token"]))
        items = await groups.lease(conn, max_groups=body.max_groups, now=now,
                                   expires=core.clock.after(body.ttl_s),
                                   versions=body.planner_versions)
        if key is not None:
            await idempotency.answer(conn, "groups.lease", key, {
                "ids": [str(g.id) for g in items],
                "token": items[0].lease_token if items else ""})
    return GroupList(items=items)


@router.post("/{group_id}/ack", status_code=204, responses=error_responses(409))
async def ack_group(group_id: uuid.UUID, body: GroupAck, core: State, _: WorkerAuth) -> None:
    """Mark a leased group consumed (trained on) or dropped (e.g. stale)."""
    await groups.ack(core.pg, group_id=group_id, token=body.lease_token, status=body.status)


@router.get("/counts")
async def group_counts(core: State, _: Reader) -> dict[str, int]:
    """Groups by status."""
    return await groups.count_by_status(core.pg)
