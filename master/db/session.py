"""Async SQLAlchemy engine (everything but the queue's hot path, which uses master.db.pg)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def make_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    return create_async_engine(url, pool_size=pool_size, max_overflow=pool_size,
                               pool_pre_ping=True)
