"""The Alembic migrations build exactly the schema the models describe, and run down again."""

from __future__ import annotations

import asyncio

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from master.db.migrate import alembic_config, upgrade
from master.db.models import Base


def _diff(sync_conn) -> list[object]:  # type: ignore[no-untyped-def]
    ctx = MigrationContext.configure(sync_conn, opts={"compare_type": True})
    return list(compare_metadata(ctx, Base.metadata))


async def test_migrations_match_models_and_downgrade(fresh_database_url: str) -> None:
    await upgrade(fresh_database_url)
    await upgrade(fresh_database_url)  # idempotent: a second replica starting changes nothing
    engine = create_async_engine(fresh_database_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
        await asyncio.to_thread(command.downgrade, alembic_config(fresh_database_url), "base")
        async with engine.connect() as conn:
            assert len(await conn.run_sync(_diff)) >= len(Base.metadata.tables)
    finally:
        await engine.dispose()
