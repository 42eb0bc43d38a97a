"""Worker tokens revoked at a running master (``/v1/admin/worker-tokens``).

The tokens in the settings (``CODA_WORKER_TOKENS``) are the bootstrap set; a revocation is a
row of ``worker_token_revocations`` naming the token by its fingerprint (the first 16 hex
digits of its SHA-256: never the token, in the database, a log or an answer). Every master
process keeps the revoked fingerprints in memory (:class:`MasterTokenAuth`), loads them at
start and re-reads them each maintenance round; the process that revokes applies it at once.
A worker records the fingerprint of the token it registered with, so a revocation finds its
workers and gives their leases back to the queue at once (as an expired lease is, an attempt
counted: :func:`master.jobs.take_back`), leaving every other worker's untouched. The SQL is in
:mod:`master.repos.revocations` and :mod:`master.repos.workers`."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime

import asyncpg
from fastapi import status

from coda.contracts.jobs import Job
from coda.logging import get_logger
from coda.service.auth import AuthError, Requirement, TokenAuth, bearer_token
from master import jobs
from master.queue.redis_queue import RedisQueue
from master.repos import revocations as revocation_rows
from master.repos import workers as worker_rows

log = get_logger("coda.master.tokens")

REVOKED = "worker token revoked"
"""Why the jobs a revoked token's workers held went back to the queue (their ``error``)."""


def fingerprint(token: str) -> str:
    """The name a token goes by: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class MasterTokenAuth(TokenAuth):
    """The master's tokens, less the revoked worker tokens: a revoked one is refused (401)
    with a detail that says it was revoked."""

    def __init__(self, tokens: Mapping[str, Iterable[str]], *, worker_role: str,
                 public_reads: bool = False) -> None:
        super().__init__(tokens, public_reads=public_reads)
        self.worker_fingerprints = sorted({fingerprint(t) for t in tokens.get(worker_role, [])
                                           if t})
        self.revoked: dict[str, datetime] = {}

    def check(self, req: Requirement, authorization: str | None) -> str:
        role = super().check(req, authorization)
        if self.revoked:
            token = bearer_token(authorization)
            fp = fingerprint(token) if token is not None else None
            if fp is not None and fp in self.revoked:
                raise AuthError(status.HTTP_401_UNAUTHORIZED,
                                f"worker token {fp} was revoked at "
                                f"{self.revoked[fp].isoformat()}: ask the master's admin "
                                "for a new token")
        return role

    def set_revoked(self, rows: Mapping[str, datetime]) -> None:
        new = set(rows) - set(self.revoked)
        self.revoked = dict(rows)
        if new:
            log.info("tokens.revocations_loaded", revoked=sorted(new))


async def load_revocations(pg: asyncpg.Pool, auth: MasterTokenAuth) -> dict[str, datetime]:
    """Bring ``auth``'s revoked fingerprints up to date with the database (at start, each
    maintenance round, and before listing them); the revocations, by fingerprint."""
    async with pg.acquire() as conn:
        revoked = await revocation_rows.revoked(conn)
    auth.set_revoked(revoked)
    return revoked


async def revoke(pg: asyncpg.Pool, queue: RedisQueue, fp: str) -> tuple[datetime, list[uuid.UUID],
                                                                         int]:
    """Store the revocation of ``fp`` (kept if already there) and give the leases of its
    workers back: (revoked at, its workers, leases returned)."""
    async with pg.acquire() as conn:
        revoked_at = await revocation_rows.revoke(conn, fp)
        worker_ids = await worker_rows.of_token(conn, fp)
    requeued, failed = await jobs.take_back(pg, queue, worker_ids=worker_ids, why=REVOKED)
    log.warning("tokens.worker_token_revoked", fingerprint=fp, workers=len(worker_ids),
                leases_requeued=requeued, leases_failed=failed)
    return revoked_at, worker_ids, requeued + failed


async def unless_revoked(pg: asyncpg.Pool, queue: RedisQueue, auth: MasterTokenAuth,
                         authorization: str | None, leased: list[Job]) -> list[Job]:
    """``leased`` (just leased), or none when the caller's token was revoked meanwhile (a
    long poll that began before the revocation): then they go back to the queue at once."""
    if not leased or not auth.revoked:
        return leased
    token = bearer_token(authorization)
    if token is None or fingerprint(token) not in auth.revoked:
        return leased
    await jobs.take_back(pg, queue, job_ids=[j.id for j in leased], why=REVOKED)
    return []
