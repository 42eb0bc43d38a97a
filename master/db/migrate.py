"""Apply Alembic migrations (``upgrade head``) under a Postgres advisory lock, so several
master replicas starting together migrate once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"
_LOCK_ID = 0x0C0DA


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


async def upgrade(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("select pg_advisory_lock(:k)"), {"k": _LOCK_ID})
            try:
                # alembic runs its own event loop in env.py: run it in a thread
                await asyncio.to_thread(command.upgrade, alembic_config(url), "head")
            finally:
                await conn.execute(text("select pg_advisory_unlock(:k)"), {"k": _LOCK_ID})
    finally:
        await engine.dispose()
