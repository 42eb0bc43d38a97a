"""The status sets of :mod:`coda.contracts.records` as SQL conditions: the one place a query
spells a set of statuses (tests/test_conventions.py keeps it so)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from coda.contracts.records import FINISHED_EPISODE_STATUSES


def status_in(statuses: Iterable[StrEnum], column: str = "status") -> str:
    """``status in ('a','b')`` of the statuses, in their enum's order (values are enum
    members, never input, so they are written inline)."""
    chosen = set(statuses)
    if not chosen:
        raise ValueError("an empty status set matches nothing")
    order = list(type(next(iter(chosen))))
    values = ",".join(f"'{s.value}'" for s in order if s in chosen)
    return f"{column} in ({values})"


ACTIVE_JOBS = "status in ('queued','leased')"
"""Queued or leased jobs (:data:`coda.contracts.records.ACTIVE_JOB_STATUSES`). Written out
because the partial index ``ix_jobs_active`` (:mod:`master.db.models`, migration 0001) names
this very predicate; a test holds it equal to the enum's set."""
FINISHED_EPISODES = status_in(FINISHED_EPISODE_STATUSES)
"""Episodes that ran to their end (:data:`FINISHED_EPISODE_STATUSES`)."""
