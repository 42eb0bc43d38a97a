"""Training groups for decoupled GRPO."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from coda.contracts.master_api import (
    GroupAck,
    GroupCreate,
    GroupCreated,
    GroupLeaseRequest,
    GroupList,
)
from coda.service import error_responses
from master.auth import Reader, WorkerAuth
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
async def lease_groups(body: GroupLeaseRequest, core: State, _: WorkerAuth) -> GroupList:
    """Lease the oldest ready groups, optionally only from some planner versions."""
    now = core.clock.now()
    return GroupList(items=await groups.lease(
        core.pg, max_groups=body.max_groups, now=now, expires=core.clock.after(body.ttl_s),
        versions=body.planner_versions))


@router.post("/{group_id}/ack", status_code=204, responses=error_responses(409))
async def ack_group(group_id: uuid.UUID, body: GroupAck, core: State, _: WorkerAuth) -> None:
    """Mark a leased group consumed (trained on) or dropped (e.g. stale)."""
    await groups.ack(core.pg, group_id=group_id, token=body.lease_token, status=body.status)


@router.get("/counts")
async def group_counts(core: State, _: Reader) -> dict[str, int]:
    """Groups by status."""
    return await groups.count_by_status(core.pg)
