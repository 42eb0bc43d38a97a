"""Worker tokens revoked at a running master (``/v1/admin/worker-tokens``).

The tokens in the settings (``CODA_WORKER_TOKENS``) are the bootstrap set; a revocation is a
row of ``worker_token_revocations`` naming the token by its fingerprint (the first 16 hex
digits of its SHA-256: never the token, in the database, a log or an answer). Every master
process keeps the revoked fingerprints in memory (:class:`MasterTokenAuth`), loads them at
start and re-reads them each maintenance round; the process that revokes applies it at once.
A worker records the fingerprint of the token it registered with, so a revocation finds its
workers and gives their leases back to the queue at once (as an expired lease would be, an
attempt counted), leaving every other worker's untouched."""

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
from master.db.pg import Conn
from master.jobs import publish
from master.queue.redis_queue import RedisQueue
from master.repos import jobs as job_rows

log = get_logger("coda.master.tokens")


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


async def revocations(conn: Conn) -> dict[str, datetime]:
    rows = await conn.fetch("select fingerprint, revoked_at from worker_token_revocations")
    return {r["fingerprint"]: r["revoked_at"] for r in rows}


async def workers_of(conn: Conn) -> dict[str, list[uuid.UUID]]:
    """Registered workers by the fingerprint of their token."""
    rows = await conn.fetch("select id, token_fingerprint from workers "
                            "where token_fingerprint is not null order by registered_at")
    out: dict[str, list[uuid.UUID]] = {}
    for r in rows:
        out.setdefault(r["token_fingerprint"], []).append(r["id"])
    return out


async def _give_back(pg: asyncpg.Pool, queue: RedisQueue, where: str, *args: object,
                     ) -> tuple[int, int]:
    """Requeue the leased jobs ``where`` selects (failed on their last attempt), as an expired
    lease would be; (requeued, failed)."""
    async with pg.acquire() as conn, conn.transaction():
        held = await conn.fetch("select id, lease_token, attempts, max_attempts from jobs "
                                f"where status = 'leased' and {where} for update", *args)
        retry = [r["id"] for r in held if r["attempts"] < r["max_attempts"]]
        dead = [r for r in held if r["attempts"] >= r["max_attempts"]]
        if retry:
            await job_rows.settle(conn, retry, final=False, error="worker token revoked")
        for r in dead:
            await job_rows.settle(conn, [r["id"]], final=True,
                                  error=f"worker token revoked on attempt {r['attempts']} "
                                  f"of {r['max_attempts']}")
    for r in held:
        await queue.release(str(r["id"]), r["lease_token"])
    await publish(pg, queue, retry)
    return len(retry), len(dead)


async def revoke(pg: asyncpg.Pool, queue: RedisQueue, fp: str) -> tuple[datetime, list[uuid.UUID],
                                                                         int]:
    """Store the revocation of ``fp`` (kept if already there) and give the leases of its
    workers back: (revoked at, its workers, leases returned)."""
    async with pg.acquire() as conn:
        revoked_at = await conn.fetchval(
            "insert into worker_token_revocations (fingerprint) values ($1) "
            "on conflict (fingerprint) do update set fingerprint = excluded.fingerprint "
            "returning revoked_at", fp)
        worker_ids = [r["id"] for r in await conn.fetch(
            "select id from workers where token_fingerprint = $1", fp)]
    requeued, failed = await _give_back(pg, queue, "worker_id = any($1)", worker_ids)
    log.warning("tokens.worker_token_revoked", fingerprint=fp, workers=len(worker_ids),
                leases_requeued=requeued, leases_failed=failed)
    return revoked_at, worker_ids, requeued + failed


async def unless_revoked(pg: asyncpg.Pool, queue: RedisQueue, auth: object,
                         authorization: str | None, jobs: list[Job]) -> list[Job]:
    """``jobs`` just leased, or none when the caller's token was revoked meanwhile (a long
    poll that began before the revocation): then they go back to the queue at once."""
    if not jobs or not isinstance(auth, MasterTokenAuth) or not auth.revoked:
        return jobs
    token = bearer_token(authorization)
    if token is None or fingerprint(token) not in auth.revoked:
        return jobs
    await _give_back(pg, queue, "id = any($1)", [j.id for j in jobs])
    return []
