"""workers.busy_slots: slots running a job, as last reported by the worker's heartbeat

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("busy_slots", sa.Integer(), server_default="0",
                                       nullable=False))


def downgrade() -> None:
    op.drop_column("workers", "busy_slots")
