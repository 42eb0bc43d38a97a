"""idempotency keys and the provider's state of each worker.

``idempotency_keys``: a request that creates or hands out something (a batch, an admin's job,
a lease of jobs or groups) may carry an ``Idempotency-Key`` header; the first request with a
key stores what it answered in the same transaction as what it created, and a retry with the
key gets that answer back instead of a second batch (``master.idempotency``). Keys older than
``CODA_IDEMPOTENCY_TTL_S`` are deleted by the maintenance loop.

``workers.provider``: the worker's view of its desktop provider, as its heartbeats report it
(ok, or the infrastructure fault it waits out and why: ``coda.contracts.desktop.ProviderState``).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(length=40), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("response", postgresql.JSONB(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.PrimaryKeyConstraint("scope", "key"),
    )
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])
    op.add_column("workers", sa.Column("provider", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("workers", "provider")
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
