"""episode -> judge -> group lifecycle: batch options (judge mode, label rule, group size);
groups remember where they come from (unique source) and why they were dropped (reason)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("options", postgresql.JSONB(astext_type=sa.Text()),
                                       server_default=sa.text("'{}'::jsonb"), nullable=False))
    op.add_column("groups", sa.Column("reason", sa.String(32), nullable=True))
    op.add_column("groups", sa.Column("source", sa.String(200), nullable=True))
    op.create_unique_constraint("groups_source_key", "groups", ["source"])


def downgrade() -> None:
    op.drop_constraint("groups_source_key", "groups", type_="unique")
    op.drop_column("groups", "source")
    op.drop_column("groups", "reason")
    op.drop_column("batches", "options")
