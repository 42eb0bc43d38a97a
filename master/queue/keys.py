"""Every Redis key the master uses, built in one place under one prefix."""

from __future__ import annotations

from dataclasses import dataclass

from coda.contracts.records import JobKind


@dataclass(frozen=True)
class Keys:
    prefix: str = "coda"

    def ready(self, kind: JobKind | str) -> str:
        """ZSET job id -> order score (priority first, then submission order)."""
        return f"{self.prefix}:ready:{JobKind(kind).value}"

    @property
    def leases(self) -> str:
        """ZSET job id -> lease expiry (unix ms)."""
        return f"{self.prefix}:leases"

    @property
    def tokens(self) -> str:
        """HASH job id -> lease token."""
        return f"{self.prefix}:tokens"

    @property
    def sentinel(self) -> str:
        """Set once the queue is built from Postgres; its absence means Redis lost its data."""
        return f"{self.prefix}:built"

    @property
    def maintenance_lock(self) -> str:
        return f"{self.prefix}:lock:maintenance"

    @property
    def reconciled(self) -> str:
        """Exists (with a TTL of one reconcile interval) while the last check is recent."""
        return f"{self.prefix}:reconciled"

    @property
    def keys_swept(self) -> str:
        """Exists (with a TTL of one sweep interval) while the last sweep of old idempotency
        keys is recent."""
        return f"{self.prefix}:idempotency-swept"
