"""The ``worker_token_revocations`` table: one row per revoked worker token, named by its
fingerprint (:func:`master.tokens.fingerprint`), never by the token."""

from __future__ import annotations

from datetime import datetime

from master.db.pg import Conn


async def revoked(conn: Conn) -> dict[str, datetime]:
    """Every revoked fingerprint, with when it was revoked."""
    rows = await conn.fetch("select fingerprint, revoked_at from worker_token_revocations")
    return {r["fingerprint"]: r["revoked_at"] for r in rows}


async def revoke(conn: Conn, fingerprint: str) -> datetime:
    """Record the revocation of ``fingerprint`` (kept if already there); when it was revoked."""
    revoked_at: datetime = await conn.fetchval(
        "insert into worker_token_revocations (fingerprint) values ($1) "
        "on conflict (fingerprint) do update set fingerprint = excluded.fingerprint "
        "returning revoked_at", fingerprint)
    return revoked_at
