"""The master's one clock for lease and heartbeat times.

Every lease expiry (Postgres ``lease_expires_at``, the Redis lease index's scores), the expiry
sweep's "now", group lease expiry and worker heartbeats are computed from :class:`Clock`, held
by the process state (:class:`master.state.AppState`), never from Postgres' ``now()``.
Timestamps that only record when something happened (``created_at``, ``updated_at``,
``started_at``) stay Postgres' own.

Tests replace time without sleeping: a master started with ``CODA_DEV=true`` and
``CODA_TEST_CLOCK=true`` serves ``POST /v1/admin/clock`` (admin token), which moves this
process's clock forward (e.g. past a lease TTL). The route does not exist otherwise, so no
production master has it and it is absent from the OpenAPI document.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class Clock:
    """Wall-clock time (UTC) plus an offset that only tests move forward."""

    def __init__(self) -> None:
        self._offset = timedelta()

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def after(self, seconds: float) -> datetime:
        """The time ``seconds`` from now (a lease's expiry)."""
        return self.now() + timedelta(seconds=seconds)

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward (tests); returns the new now."""
        if seconds < 0:
            raise ValueError("advance_s: the clock only moves forward")
        self._offset += timedelta(seconds=seconds)
        return self.now()


def ms(dt: datetime) -> int:
    """Unix milliseconds (the Redis lease index's scores)."""
    return int(dt.timestamp() * 1000)
