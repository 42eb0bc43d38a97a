"""worker token revocations: an admin revokes a worker token at a running master
(``DELETE /v1/admin/worker-tokens/{fingerprint}``). A revocation is stored by the token's
fingerprint (never the token), read by every master process; a worker records the fingerprint
of the token it registered with, so the leases of a revoked token's workers can be found.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("token_fingerprint", sa.String(length=64), nullable=True))
    op.create_index("ix_workers_token_fingerprint", "workers", ["token_fingerprint"])
    op.create_table(
        "worker_token_revocations",
        sa.Column("fingerprint", sa.String(length=64), primary_key=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
    )


def downgrade() -> None:
    op.drop_table("worker_token_revocations")
    op.drop_index("ix_workers_token_fingerprint", table_name="workers")
    op.drop_column("workers", "token_fingerprint")
