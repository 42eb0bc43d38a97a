"""Master settings (environment prefix ``CODA_``; ``DATABASE_URL``/``REDIS_URL`` also read).

Secrets (``admin_token``, ``worker_tokens``) are ``SecretStr``: they never show in a repr or a
log line; outside ``dev`` mode a default or short one refuses to start, as the model services
do. ``test_clock`` (dev mode only) opens ``POST /v1/admin/clock`` (see :mod:`master.clock`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from coda.urls import to_asyncpg_url

DEFAULT_ADMIN_TOKEN = "change-me-admin"
DEFAULT_WORKER_TOKEN = "change-me-worker"
MIN_SECRET_CHARS = 16


class DefaultSecretError(RuntimeError):
    """A default secret is configured outside development mode."""


class MasterSettings(BaseSettings):
    # a refused value (a URL with its password, a token) is never echoed in the error
    model_config = SettingsConfigDict(env_prefix="CODA_", extra="ignore",
                                      hide_input_in_errors=True)

    database_url: str = Field(
        default="postgresql+asyncpg://postgres@127.0.0.1:5432/coda",
        validation_alias=AliasChoices("CODA_DATABASE_URL", "DATABASE_URL"),
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=AliasChoices("CODA_REDIS_URL", "REDIS_URL"),
    )
    redis_prefix: str = Field(default="coda", pattern=r"^[A-Za-z0-9_.-]+$",
                              description="namespace of every Redis key")
    dev: bool = Field(default=False, description="development mode: default secrets allowed")
    admin_token: SecretStr = Field(default=SecretStr(DEFAULT_ADMIN_TOKEN),
                                   description="bearer token: submit, cancel, versions")
    worker_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=lambda: [SecretStr(DEFAULT_WORKER_TOKEN)],
        description="bearer tokens of workers and the trainer (comma-separated)")
    test_clock: bool = Field(
        default=False, description="tests only (needs dev): POST /v1/admin/clock moves this "
        "process's lease clock forward; never set it in production")
    public_status: bool = Field(default=True, description="status page and reads without a token")
    coverage_file: str | None = Field(
        default=None, description="a task coverage report (`coda tasks coverage DIR --json "
        "FILE`) shown by the status page and the dashboard")
    artifacts_url: str = Field(default="./.coda/artifacts", description="fsspec URL")
    max_upload_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    lease_ttl_s: float = Field(default=60.0, gt=0, description="lease lifetime without heartbeat")
    maintenance_interval_s: float = Field(default=1.0, gt=0, description="lease expiry sweep")
    reconcile_interval_s: float = Field(default=10.0, gt=0, description="queue rebuild check")
    long_poll_step_s: float = Field(default=0.25, gt=0)
    db_pool_size: int = Field(default=20, ge=2, description="asyncpg pool per process")
    redis_max_connections: int = Field(default=200, ge=1)
    shed_max_in_flight: int = Field(
        default=32, ge=0, le=100_000, description="API requests (/v1/...) one master process "
        "serves at once; past it a request waits up to shed_queue_wait_s for a turn, then is "
        "refused with 503 and Retry-After (0: no limit). Health, metrics and the status pages "
        "are never refused")
    shed_queue_wait_s: float = Field(
        default=0.1, ge=0, le=60, description="how long a request past shed_max_in_flight "
        "waits for a turn before the 503")
    shed_max_loop_lag_s: float = Field(
        default=0.1, ge=0, le=60, description="while the process's event loop runs later than "
        "this (requests wait behind its backlog before a handler sees them), no request waits "
        "for a turn and only a quarter of shed_max_in_flight are served (0: not watched)")
    shed_retry_after_s: int = Field(
        default=1, ge=1, le=3600, description="the Retry-After of a refusal (seconds); "
        "workers wait this long plus jitter")
    idempotency_ttl_s: float = Field(
        default=86_400.0, ge=60, description="how long the answer of a request sent with an "
        "Idempotency-Key is kept for its retries (batches, admin jobs, leases)")
    unavailable_retry_after_s: int = Field(
        default=1, ge=1, le=3600, description="the Retry-After of a 503 answered because "
        "PostgreSQL, Redis or the network under them failed (a restart, a stop): clients "
        "retry after it")
    gc_thresholds: tuple[int, int, int] = Field(
        default=(20_000, 20, 50), description="gc.set_threshold after start-up")
    group_staleness_versions: int = Field(
        default=2, ge=1, le=1000, description="a group job's group is kept only when sampled by "
        "one of this many newest planner versions (the base model counts as the oldest)")
    log_level: str = "INFO"

    @field_validator("database_url")
    @classmethod
    def _asyncpg(cls, v: str) -> str:
        return to_asyncpg_url(v)  # Alembic's form; the pool takes to_plain_postgres_url of it

    @field_validator("worker_tokens", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        if isinstance(v, str) and not v.lstrip().startswith("["):
            return [t.strip() for t in v.split(",") if t.strip()]
        return v

    @model_validator(mode="after")
    def _secrets(self) -> MasterSettings:
        if not self.worker_tokens:
            raise ValueError("worker_tokens: at least one worker token is required")
        if self.test_clock and not self.dev:
            raise ValueError("test_clock: only in development mode (CODA_DEV=true)")
        return self

    def tokens(self) -> tuple[str, list[str]]:
        """The admin token and the worker tokens, in the clear (for the auth check only)."""
        return (self.admin_token.get_secret_value(),
                [t.get_secret_value() for t in self.worker_tokens])

    def check_secrets(self) -> None:
        """Refuse default or weak secrets unless ``dev`` is set."""
        if self.dev:
            return
        admin, workers = self.tokens()
        weak = [name for name, value in (
            ("CODA_ADMIN_TOKEN", admin), *(("CODA_WORKER_TOKENS", t) for t in workers),
        ) if value in (DEFAULT_ADMIN_TOKEN, DEFAULT_WORKER_TOKEN)
            or len(value) < MIN_SECRET_CHARS]
        if weak:
            raise DefaultSecretError(
                f"refusing to start: {', '.join(sorted(set(weak)))} is a default or shorter "
                f"than {MIN_SECRET_CHARS} characters; set a real secret or CODA_DEV=true for "
                "development")
