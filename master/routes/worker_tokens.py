"""Revoking a worker token at a running master (:mod:`master.tokens`): the worker tokens the
master knows, by fingerprint, and ``DELETE`` to revoke one. Admin only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status

from coda.contracts.master_api import TOKEN_FINGERPRINT_PATTERN, WorkerTokenInfo, WorkerTokenRevoked
from coda.service import error_responses
from master import tokens
from master.auth import Admin
from master.repos import workers as worker_rows
from master.state import State

router = APIRouter(prefix="/v1/admin/worker-tokens", tags=["admin"])
Fingerprint = Annotated[str, Path(pattern=TOKEN_FINGERPRINT_PATTERN,
                                  description="the token's fingerprint (GET lists them)")]


@router.get("")
async def list_worker_tokens(core: State, _: Admin) -> list[WorkerTokenInfo]:
    """The worker tokens of the master's settings by fingerprint (the first 16 hex digits of
    the token's SHA-256; ``coda admin worker-tokens`` prints a token's), when each was
    revoked, and the workers registered with each."""
    revoked = await tokens.load_revocations(core.pg, core.auth)
    workers = await worker_rows.by_token(core.pg)
    return [WorkerTokenInfo(fingerprint=fp, revoked_at=revoked.get(fp),
                            workers=workers.get(fp, [])) for fp in core.auth.worker_fingerprints]


@router.delete("/{fingerprint}", responses=error_responses(404))
async def revoke_worker_token(fingerprint: Fingerprint, core: State,
                              _: Admin) -> WorkerTokenRevoked:
    """Revoke a worker token: from now on its requests are refused (401, the detail says it
    was revoked), and the jobs its workers hold go back to the queue at once (an attempt
    counted, as for an expired lease). Other workers are untouched. Revoking twice is no
    error. Every master process refuses it within one maintenance interval (this one at
    once); to use the token again, give the workers a new one in ``CODA_WORKER_TOKENS``."""
    auth = core.auth
    if fingerprint not in auth.worker_fingerprints:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"no worker token with fingerprint {fingerprint}")
    revoked_at, workers, returned = await tokens.revoke(core.pg, core.queue, fingerprint)
    auth.set_revoked({**auth.revoked, fingerprint: revoked_at})
    return WorkerTokenRevoked(fingerprint=fingerprint, revoked_at=revoked_at, workers=workers,
                              leases_returned=returned)
