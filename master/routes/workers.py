"""Worker registration and heartbeats."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request

from coda.contracts.master_api import WorkerHeartbeat, WorkerRegister
from coda.contracts.records import Worker
from coda.service import error_responses
from coda.service.auth import bearer_token
from master.auth import Reader, WorkerAuth
from master.repos import workers
from master.shedding import keeps_work
from master.state import State
from master.tokens import fingerprint

router = APIRouter(prefix="/v1/workers", tags=["workers"])


@router.post("", status_code=201)
async def register_worker(body: WorkerRegister, request: Request, core: State,
                          _: WorkerAuth) -> Worker:
    """Register a worker (a VM server with ``slots`` environments); the master records the
    fingerprint of its token (a revocation gives back the leases of its workers)."""
    token = bearer_token(request.headers.get("authorization"))
    return await workers.register(core.pg, body, now=core.clock.now(),
                                  token_fingerprint=fingerprint(token) if token else None)


@router.post("/{worker_id}/heartbeat", responses=error_responses(404))
@keeps_work
async def worker_heartbeat(worker_id: uuid.UUID, body: WorkerHeartbeat, core: State,
                           _: WorkerAuth) -> Worker:
    """Mark the worker alive and record how many of its slots are busy and how its desktop
    provider is (ok, or the infrastructure fault it waits out)."""
    return await workers.heartbeat(core.pg, worker_id, busy_slots=body.busy_slots,
                                   now=core.clock.now(), provider=body.provider)


@router.get("")
async def list_workers(core: State, _: Reader) -> list[Worker]:
    """Workers, most recently seen first; ``online``: a heartbeat within the lease TTL."""
    return await workers.list_workers(core.pg, now=core.clock.now(),
                                      online_within_s=core.settings.lease_ttl_s)
