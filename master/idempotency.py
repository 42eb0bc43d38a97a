"""Idempotency keys: a request that creates or hands out something (``POST /v1/batches``,
``/v1/batches/upload``, ``/v1/jobs``, ``/v1/jobs/lease``, ``/v1/groups/lease``) may carry an
``Idempotency-Key`` header (any printable ASCII, at most 200 characters; a random UUID per
logical request, the same on every retry of it). The first request with a key records what it
answered in the transaction that made it; a retry gets that answer back (with
``Idempotent-Replayed: true``) instead of a second batch, job or lease. A key sent with another
request (a different body) is refused, 422 naming the header. Keys are kept for
``CODA_IDEMPOTENCY_TTL_S`` (a day by default)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

import asyncpg
from fastapi import Header, Response

from coda.service import FieldError
from master.repos import idempotency as rows

KEY_MAX = 200
HEADER = "idempotency-key"
REPLAYED = "idempotent-replayed"

IdempotencyKey = Annotated[str | None, Header(
    alias=HEADER, min_length=1, max_length=KEY_MAX, pattern=r"^[\x21-\x7e]+$",
    description="makes a retry of this request return what the first one answered instead "
                "of doing it again (a random UUID per request, the same on every retry)")]


def digest(*parts: Any) -> str:
    """What identifies a request's content (its body, its form fields, its file)."""
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True,
                                                                default=str).encode()
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def _same(row: asyncpg.Record, key: str, want: str) -> dict[str, Any]:
    if row["digest"] != want:
        raise FieldError(("header", HEADER), f"{HEADER}: {key[:40]!r} was sent with another "
                         "request (a different body): send a new key for a new request")
    response: dict[str, Any] = row["response"]
    return response


async def reserve(conn: asyncpg.Connection, scope: str, key: str,
                  want: str) -> dict[str, Any] | None:
    """Inside the transaction that will create: None when this request takes ``key`` (record
    the answer with :func:`answer` before committing), else what the first request with it
    answered. Raises the 422 for a key sent with another body."""
    row = await rows.reserve(conn, scope, key, want)
    return None if row is None else _same(row, key, want)


async def earlier(conn: asyncpg.Pool | asyncpg.Connection, scope: str, key: str,
                  want: str) -> dict[str, Any] | None:
    """What the first request with ``key`` answered (None: none did yet)."""
    row = await rows.stored(conn, scope, key)
    return None if row is None or row["response"] is None else _same(row, key, want)


answer = rows.answer
keep = rows.keep


def replayed(response: Response) -> None:
    """Mark an answer given again for a retried request."""
    response.headers[REPLAYED] = "true"
