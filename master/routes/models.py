"""Model versions (planner adapters published by the trainer)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from coda.contracts.master_api import ModelVersionList
from coda.contracts.training import ModelRole, ModelVersion, ModelVersionCreate
from coda.service import error_responses
from master.auth import Admin, Reader
from master.errors import VersionExists
from master.repos import versions
from master.state import State

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.post("", status_code=201, responses=error_responses(409))
async def register_version(body: ModelVersionCreate, core: State, _: Admin) -> ModelVersion:
    """Register a model version (made current for its role unless ``make_current`` is false)."""
    try:
        return await versions.register(core.pg, body)
    except VersionExists as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, f"version {exc} already exists") from exc


@router.get("")
async def list_versions(core: State, _: Reader, role: ModelRole | None = None) -> ModelVersionList:
    """All versions, oldest first."""
    return ModelVersionList(items=await versions.list_versions(core.pg, role))


@router.get("/current", responses=error_responses(404))
async def current_version(core: State, _: Reader,
                          role: ModelRole = ModelRole.PLANNER) -> ModelVersion:
    """The current version of a role."""
    found = await versions.current(core.pg, role)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no current {role.value} version")
    return found
