"""Tables. Postgres is the source of truth: the Redis queue can always be rebuilt from ``jobs``."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Identity,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from master.db.statuses import ACTIVE_JOBS


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONB, uuid.UUID: UUID(as_uuid=True),
                           datetime: DateTime(timezone=True)}


def _now() -> Any:
    return func.now()


class BatchRow(Base):
    __tablename__ = "batches"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20))
    priority: Mapped[int] = mapped_column(Integer)
    rollouts: Mapped[int] = mapped_column(Integer)
    planner_version: Mapped[str | None] = mapped_column(String(200))
    options: Mapped[dict[str, Any]] = mapped_column(server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(server_default=_now())


class TaskRow(Base):
    """A task as submitted in one batch (the spec is kept whole)."""

    __tablename__ = "tasks"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    batch_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"),
                                                index=True)
    task_id: Mapped[str] = mapped_column(String(200))
    app: Mapped[str] = mapped_column(String(100))
    spec: Mapped[dict[str, Any]]


class JobRow(Base):
    __tablename__ = "jobs"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True)
    kind: Mapped[str] = mapped_column(String(20))
    status: Mapped[str] = mapped_column(String(20))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    payload: Mapped[dict[str, Any]]
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    worker_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("workers.id"))
    batch_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"))
    error: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(server_default=_now())
    updated_at: Mapped[datetime] = mapped_column(server_default=_now())

    __table_args__ = (
        Index("ix_jobs_active", "kind", "status", postgresql_where=ACTIVE_JOBS),
        Index("ix_jobs_batch", "batch_id"),
    )


class EpisodeRow(Base):
    __tablename__ = "episodes"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    batch_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("batches.id", ondelete="CASCADE"))
    task_row_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    job_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                              unique=True)
    task_id: Mapped[str] = mapped_column(String(200))
    app: Mapped[str] = mapped_column(String(100))
    rollout: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    success: Mapped[bool | None] = mapped_column(Boolean)
    score: Mapped[float | None] = mapped_column(Float)
    answer: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    planner_version: Mapped[str | None] = mapped_column(String(200))
    result: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(server_default=_now())
    updated_at: Mapped[datetime] = mapped_column(server_default=_now(), index=True)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    verdict: Mapped[dict[str, Any] | None]

    __table_args__ = (Index("ix_episodes_batch_status", "batch_id", "status"),)


class StepRow(Base):
    __tablename__ = "steps"
    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    episode_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("episodes.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    idx: Mapped[int] = mapped_column(Integer)
    body: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=_now())

    __table_args__ = (UniqueConstraint("episode_id", "attempt", "idx", name="uq_steps_slot"),)


class WorkerRow(Base):
    __tablename__ = "workers"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    host: Mapped[str | None] = mapped_column(String(200))
    slots: Mapped[int] = mapped_column(Integer)
    kinds: Mapped[dict[str, Any]]
    registered_at: Mapped[datetime] = mapped_column(server_default=_now())
    last_heartbeat: Mapped[datetime | None] = mapped_column(index=True)
    busy_slots: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    token_fingerprint: Mapped[str | None] = mapped_column(String(64), index=True)
    """The fingerprint of the worker token it registered with (``master.tokens``)."""
    provider: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    """Its desktop provider as its last heartbeat said (``coda.contracts.desktop.
    ProviderState``): ok, or the infrastructure fault it waits out."""


class IdempotencyKeyRow(Base):
    """What the first request with an ``Idempotency-Key`` answered (``master.idempotency``)."""

    __tablename__ = "idempotency_keys"
    scope: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64))
    response: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(server_default=_now(), index=True)


class WorkerTokenRevocationRow(Base):
    """A worker token revoked at a running master, by its fingerprint (never the token)."""

    __tablename__ = "worker_token_revocations"
    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    revoked_at: Mapped[datetime] = mapped_column(server_default=_now())


class GroupRow(Base):
    __tablename__ = "groups"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    status: Mapped[str] = mapped_column(String(20))
    planner_version: Mapped[str | None] = mapped_column(String(200))
    body: Mapped[dict[str, Any]]
    lease_token: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    reason: Mapped[str | None] = mapped_column(String(32))
    source: Mapped[str | None] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(server_default=_now())

    __table_args__ = (Index("ix_groups_status", "status", "created_at"),)


class ModelVersionRow(Base):
    __tablename__ = "model_versions"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    role: Mapped[str] = mapped_column(String(20))
    base_model: Mapped[str] = mapped_column(Text)
    adapter_uri: Mapped[str | None] = mapped_column(Text)
    parent: Mapped[str | None] = mapped_column(String(200))
    is_current: Mapped[bool] = mapped_column(Boolean, default=False)
    metrics: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=_now())


class TrainingMetricRow(Base):
    """The figures of one trainer update."""

    __tablename__ = "training_metrics"
    run: Mapped[str] = mapped_column(String(200), primary_key=True)
    update: Mapped[int] = mapped_column(Integer, primary_key=True)
    planner_version: Mapped[str] = mapped_column(String(200))
    metrics: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(server_default=_now())

    __table_args__ = (Index("ix_training_metrics_version", "planner_version", "update"),)
