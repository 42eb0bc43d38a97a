"""Atomic queue operations on Redis (Lua), no knowledge of Postgres.

Order score = ``-priority * 2**41 + seq``: higher priority first, FIFO within a priority.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis

from coda.contracts.records import JobKind
from master.queue.keys import Keys

_PRIORITY_SHIFT = 2**41
PUSH_CHUNK = 5000

# KEYS: ready, leases, tokens; ARGV: expiry_ms, token1..tokenN  -> [id1, id2, ...]
_LEASE = """
local n = #ARGV - 1
local popped = redis.call('ZPOPMIN', KEYS[1], n)
local out = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local token = ARGV[(i + 1) / 2 + 1]
  redis.call('ZADD', KEYS[2], ARGV[1], id)
  redis.call('HSET', KEYS[3], id, token)
  out[#out + 1] = id
end
return out
"""

# KEYS: leases, tokens; ARGV: id, token, expiry_ms -> 1 extended, 0 unknown/stale
_HEARTBEAT = """
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
return 0
"""

# KEYS: leases, tokens; ARGV: expiry_ms, id1, token1, id2, token2, ... -> {1|0, ...}
_HEARTBEAT_MANY = """
local out = {}
for i = 2, #ARGV, 2 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
"""

# KEYS: leases, tokens; ARGV: id, token -> 1 released, 0 not held with that token
_RELEASE = """
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 1
end
return 0
"""

# KEYS: leases, tokens; ARGV: now_ms, limit -> [id1, token1, ...] (claimed: removed)
_CLAIM_EXPIRED = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local token = redis.call('HGET', KEYS[2], id) or ''
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  out[#out + 1] = id
  out[#out + 1] = token
end
return out
"""


def _strs(members: Iterable[Any]) -> set[str]:
    return {m.decode() if isinstance(m, bytes) else str(m) for m in members}


def order_score(priority: int, seq: int) -> int:
    return -priority * _PRIORITY_SHIFT + seq


class RedisQueue:
    def __init__(self, redis: aioredis.Redis, keys: Keys) -> None:
        self.r = redis
        self.k = keys
        self._lease = redis.register_script(_LEASE)
        self._heartbeat = redis.register_script(_HEARTBEAT)
        self._heartbeat_many = redis.register_script(_HEARTBEAT_MANY)
        self._release = redis.register_script(_RELEASE)
        self._claim = redis.register_script(_CLAIM_EXPIRED)

    async def push(self, kind: JobKind | str, items: Iterable[tuple[str, int, int]]) -> None:
        """Make jobs ready: ``(job_id, priority, seq)``."""
        mapping = {jid: order_score(p, s) for jid, p, s in items}
        chunk = list(mapping.items())
        for lo in range(0, len(chunk), PUSH_CHUNK):  # Redis is never busy for long on one call
            await self.r.zadd(self.k.ready(kind), dict(chunk[lo:lo + PUSH_CHUNK]))

    async def remove(self, kind: JobKind | str, job_ids: Sequence[str]) -> None:
        """Take jobs out of the ready set and the lease index in one MULTI: a heartbeat
        between the two would otherwise leave a lease without its token."""
        if job_ids:
            pipe = self.r.pipeline(transaction=True)
            pipe.zrem(self.k.ready(kind), *job_ids)
            pipe.zrem(self.k.leases, *job_ids)
            pipe.hdel(self.k.tokens, *job_ids)
            await pipe.execute()

    async def drop_ready(self, kind: JobKind | str, job_ids: Sequence[str]) -> None:
        """Take jobs out of the ready set only (strays a rebuild found: their leases, if
        any, are Postgres' to keep)."""
        if job_ids:
            await self.r.zrem(self.k.ready(kind), *job_ids)

    async def lease(self, kind: JobKind | str, tokens: Sequence[str], expiry_ms: int) -> list[str]:
        """Pop up to ``len(tokens)`` ready jobs and hold them with those tokens."""
        ids = await self._lease(keys=[self.k.ready(kind), self.k.leases, self.k.tokens],
                                args=[expiry_ms, *tokens])
        return [i.decode() if isinstance(i, bytes) else i for i in ids]

    async def heartbeat(self, job_id: str, token: str, expiry_ms: int) -> bool:
        return bool(await self._heartbeat(keys=[self.k.leases, self.k.tokens],
                                          args=[job_id, token, expiry_ms]))

    async def heartbeat_many(self, leases: Sequence[tuple[str, str]],
                             expiry_ms: int) -> list[bool]:
        """Extend every ``(job_id, token)`` still held with its token, in one round trip;
        whether each was extended, in order."""
        if not leases:
            return []
        args: list[Any] = [expiry_ms]
        for job_id, token in leases:
            args += [job_id, token]
        got = await self._heartbeat_many(keys=[self.k.leases, self.k.tokens], args=args)
        return [bool(v) for v in got]

    async def release(self, job_id: str, token: str) -> bool:
        return bool(await self._release(keys=[self.k.leases, self.k.tokens], args=[job_id, token]))

    async def hold(self, items: Iterable[tuple[str, str, int]], *, only_new: bool = True) -> None:
        """Record leases ``(job_id, token, expiry_ms)`` (used when rebuilding)."""
        items = list(items)
        if not items:
            return
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(self.k.leases, {jid: exp for jid, _, exp in items}, nx=only_new)
        pipe.hset(self.k.tokens, mapping={jid: tok for jid, tok, _ in items})
        await pipe.execute()

    async def claim_expired(self, now_ms: int, limit: int = 1000) -> list[tuple[str, str]]:
        flat = await self._claim(keys=[self.k.leases, self.k.tokens], args=[now_ms, limit])
        flat = [x.decode() if isinstance(x, bytes) else x for x in flat]
        return list(zip(flat[0::2], flat[1::2], strict=True))

    async def snapshot(
        self, kinds: Sequence[JobKind | str],
    ) -> tuple[set[str], dict[str, set[str]]]:
        """Leased ids and ready ids per kind, read atomically (MULTI): a job moving from ready
        to leased between two separate reads would be in neither."""
        pipe = self.r.pipeline(transaction=True)
        pipe.zrange(self.k.leases, 0, -1)
        for kind in kinds:
            pipe.zrange(self.k.ready(kind), 0, -1)
        leased, *ready = await pipe.execute()
        return _strs(leased), {JobKind(k).value: _strs(r) for k, r in zip(kinds, ready,
                                                                           strict=True)}

    async def sizes(self, kinds: Sequence[JobKind | str]) -> tuple[int, dict[str, int]]:
        """How many jobs are leased, and ready per kind (cheap: ZCARD only)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.zcard(self.k.leases)
        for kind in kinds:
            pipe.zcard(self.k.ready(kind))
        leased, *ready = await pipe.execute()
        return int(leased), {JobKind(k).value: int(n) for k, n in zip(kinds, ready, strict=True)}

    async def is_built(self) -> bool:
        return bool(await self.r.exists(self.k.sentinel))

    async def mark_built(self) -> None:
        await self.r.set(self.k.sentinel, "1")
