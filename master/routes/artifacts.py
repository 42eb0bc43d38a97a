"""Screenshot and other artifact upload/download (content-addressed)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, File, HTTPException, Response, UploadFile, status

from coda.artifacts import CONTENT_TYPES, ArtifactError, content_type_of, validate_key
from coda.contracts.master_api import ArtifactRef
from coda.service import error_responses
from master.auth import Reader, WorkerAuth
from master.state import State

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])


@router.post("", status_code=201, responses=error_responses(415))
async def upload_artifact(core: State, _: WorkerAuth,
                          file: Annotated[UploadFile, File()]) -> ArtifactRef:
    """Store an image (PNG/JPEG/WebP) or JSON; the key is its SHA-256."""
    limit = core.settings.max_upload_bytes
    data = await file.read(limit + 1)
    if len(data) > limit:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"file: larger than the {limit}-byte limit")
    ctype = (file.content_type or "").split(";")[0].strip()
    try:
        key = await asyncio.to_thread(core.store.put, data, ctype)
    except ArtifactError as exc:
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, f"file: {exc}") from exc
    return ArtifactRef(key=key, size=len(data), content_type=ctype)


_BINARY = {"schema": {"type": "string", "format": "binary"}}
_DOWNLOAD = {200: {"description": "The artifact's bytes, with the content type of its key",
                   "content": {ctype: ({"schema": {}} if ctype == "application/json" else _BINARY)
                               for ctype in CONTENT_TYPES}},
             **error_responses(400, 404)}


@router.get("/{key:path}", response_class=Response, responses=_DOWNLOAD)
async def get_artifact(key: str, core: State, _: Reader) -> Response:
    """Download an artifact by key."""
    try:
        validate_key(key)
        data = await asyncio.to_thread(core.store.get, key)
    except ArtifactError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
    except KeyError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no artifact {key}") from exc
    return Response(data, media_type=content_type_of(key),
                    headers={"cache-control": "public, max-age=31536000, immutable"})
