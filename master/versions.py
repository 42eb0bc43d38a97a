"""Model versions (planner adapters and the like): register, list, current."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from coda.contracts.training import ModelRole, ModelVersion, ModelVersionCreate


class VersionExists(Exception):
    pass


def _model(r: Any) -> ModelVersion:
    return ModelVersion(name=r.name, role=ModelRole(r.role), base_model=r.base_model,
                        adapter_uri=r.adapter_uri, parent=r.parent, is_current=r.is_current,
                        metrics=r.metrics, created_at=r.created_at)


_COLS = "name, role, base_model, adapter_uri, parent, is_current, metrics, created_at"


async def register(engine: AsyncEngine, spec: ModelVersionCreate) -> ModelVersion:
    async with engine.begin() as conn:
        if (await conn.execute(text("select 1 from model_versions where name = :n"),
                               {"n": spec.name})).first():
            raise VersionExists(spec.name)
        if spec.make_current:
            await conn.execute(text(
                "update model_versions set is_current = false where role = :r and is_current"),
                {"r": spec.role.value})
        row = (await conn.execute(text(
            "insert into model_versions (name, role, base_model, adapter_uri, parent, is_current, "
            f"metrics) values (:n, :r, :b, :a, :p, :c, :m) returning {_COLS}"
        ).bindparams(bindparam("m", type_=JSONB)), {
            "n": spec.name, "r": spec.role.value, "b": spec.base_model, "a": spec.adapter_uri,
            "p": spec.parent, "c": spec.make_current, "m": spec.metrics})).one()
    return _model(row)


async def list_versions(engine: AsyncEngine, role: ModelRole | None) -> list[ModelVersion]:
    where = "where role = :r" if role else ""
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            f"select {_COLS} from model_versions {where} order by created_at"),
            {"r": role.value} if role else {})).all()
    return [_model(r) for r in rows]


async def current(engine: AsyncEngine, role: ModelRole) -> ModelVersion | None:
    async with engine.connect() as conn:
        row = (await conn.execute(text(
            f"select {_COLS} from model_versions where role = :r and is_current"),
            {"r": role.value})).first()
    return _model(row) if row else None
