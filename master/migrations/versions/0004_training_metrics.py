"""training_metrics (one row per trainer update) and episodes.verdict (the judge's verdict)

Revision ID: 0004
Revises: 0002
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "training_metrics",
        sa.Column("run", sa.String(200), nullable=False),
        sa.Column("update", sa.Integer(), nullable=False),
        sa.Column("planner_version", sa.String(200), nullable=False),
        sa.Column("metrics", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.PrimaryKeyConstraint("run", "update"),
    )
    op.create_index("ix_training_metrics_version", "training_metrics",
                    ["planner_version", "update"])
    op.add_column("episodes", sa.Column("verdict", postgresql.JSONB(astext_type=sa.Text()),
                                        nullable=True))


def downgrade() -> None:
    op.drop_column("episodes", "verdict")
    op.drop_index("ix_training_metrics_version", table_name="training_metrics")
    op.drop_table("training_metrics")
