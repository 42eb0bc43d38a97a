"""The status sets' SQL comes from the enums: the one literal (the partial index's predicate)
equals the enum's set, and the index the models and migration 0001 declare is that predicate."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda.contracts.records import (
    ACTIVE_JOB_STATUSES,
    FINISHED_EPISODE_STATUSES,
    EpisodeStatus,
    JobStatus,
)
from master.db import statuses
from master.db.models import JobRow
from master.db.statuses import ACTIVE_JOBS, FINISHED_EPISODES, status_in

MIGRATION = Path(statuses.__file__).parents[1] / "migrations/versions/0001_initial_schema.py"


def test_the_active_jobs_literal_is_the_enums_set() -> None:
    assert status_in(ACTIVE_JOB_STATUSES) == ACTIVE_JOBS
    assert status_in(FINISHED_EPISODE_STATUSES) == FINISHED_EPISODES


def test_the_partial_index_names_the_active_jobs_predicate() -> None:
    index = next(i for i in JobRow.__table__.indexes if i.name == "ix_jobs_active")
    assert str(index.dialect_options["postgresql"]["where"]) == ACTIVE_JOBS
    assert f'postgresql_where="{ACTIVE_JOBS}"' in MIGRATION.read_text()


def test_the_sets_split_each_enum() -> None:
    """Active jobs are the queue's; every other job status is terminal. A finished episode ran
    to its end: neither waiting, running, nor cancelled."""
    assert {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED} \
        == set(JobStatus) - ACTIVE_JOB_STATUSES
    assert set(EpisodeStatus) - FINISHED_EPISODE_STATUSES \
        == {EpisodeStatus.QUEUED, EpisodeStatus.RUNNING, EpisodeStatus.CANCELLED}


def test_status_in_keeps_the_enum_order_and_refuses_an_empty_set() -> None:
    assert status_in([EpisodeStatus.FAILED, EpisodeStatus.QUEUED], "e.status") \
        == "e.status in ('queued','failed')"
    with pytest.raises(ValueError, match="empty"):
        status_in([])
