"""The ``model_versions`` table (planner adapters and the like): register, list, current."""

from __future__ import annotations

import asyncpg

from coda.contracts.training import ModelRole, ModelVersion, ModelVersionCreate
from master.db.pg import Conn
from master.errors import VersionExists


def _model(r: asyncpg.Record) -> ModelVersion:
    return ModelVersion(name=r["name"], role=ModelRole(r["role"]), base_model=r["base_model"],
                        adapter_uri=r["adapter_uri"], parent=r["parent"],
                        is_current=r["is_current"], metrics=r["metrics"],
                        created_at=r["created_at"])


_COLS = "name, role, base_model, adapter_uri, parent, is_current, metrics, created_at"


async def register(pg: asyncpg.Pool, spec: ModelVersionCreate) -> ModelVersion:
    async with pg.acquire() as conn, conn.transaction():
        if await conn.fetchval("select 1 from model_versions where name = $1", spec.name):
            raise VersionExists(spec.name)
        if spec.make_current:
            await conn.execute("update model_versions set is_current = false "
                               "where role = $1 and is_current", spec.role.value)
        row = await conn.fetchrow(
            "insert into model_versions (name, role, base_model, adapter_uri, parent, "
            f"is_current, metrics) values ($1, $2, $3, $4, $5, $6, $7) returning {_COLS}",
            spec.name, spec.role.value, spec.base_model, spec.adapter_uri, spec.parent,
            spec.make_current, spec.metrics)
    return _model(row)


async def list_versions(conn: Conn, role: ModelRole | None) -> list[ModelVersion]:
    if role is None:
        rows = await conn.fetch(f"select {_COLS} from model_versions order by created_at")
    else:
        rows = await conn.fetch(f"select {_COLS} from model_versions where role = $1 "
                                "order by created_at", role.value)
    return [_model(r) for r in rows]


async def current(conn: Conn, role: ModelRole) -> ModelVersion | None:
    row = await conn.fetchrow(
        f"select {_COLS} from model_versions where role = $1 and is_current", role.value)
    return _model(row) if row else None


async def current_name(conn: Conn, role: ModelRole = ModelRole.PLANNER) -> str | None:
    return await conn.fetchval(
        "select name from model_versions where role = $1 and is_current limit 1", role.value)


async def newest_names(conn: Conn, limit: int, role: ModelRole = ModelRole.PLANNER) -> list[str]:
    return [r["name"] for r in await conn.fetch(
        "select name from model_versions where role = $1 order by created_at desc limit $2",
        role.value, limit)]
