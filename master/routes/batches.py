"""Batches: submit tasks x k rollouts, read progress, cancel."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, HTTPException, Query, UploadFile, status
from pydantic import ValidationError

from coda.contracts.master_api import BatchCreate, BatchCreated, BatchList
from coda.contracts.records import Batch
from coda.tasks import TaskLoadError, TaskSpec, parse_task
from master import batches
from master.auth import Admin, Reader
from master.state import State

router = APIRouter(prefix="/v1/batches", tags=["batches"])


def _parse_tasks(docs: list[dict[str, Any]], filename: str | None = None) -> list[TaskSpec]:
    """Task documents -> specs; a raw ScienceBoard document gets its id from the uploaded file
    name (one document) or from its content."""
    tasks, errors = [], []
    path = filename if len(docs) == 1 else None
    for i, doc in enumerate(docs):
        try:
            tasks.append(parse_task(doc, path=path))
        except TaskLoadError as exc:
            errors.append({"loc": ["body", "tasks", i], "msg": f"tasks[{i}]: {exc}",
                           "type": "task_invalid"})
    if errors:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, errors)
    ids = [t.id for t in tasks]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [
            {"loc": ["body", "tasks"], "msg": f"duplicate task ids: {dup}", "type": "duplicate"}])
    return tasks


@router.post("", status_code=201)
async def create_batch(body: BatchCreate, core: State, _: Admin) -> BatchCreated:
    """Create a batch: every task runs ``rollouts`` times."""
    batch, episodes = await batches.create(core.engine, core.pg, core.queue, body,
                                           _parse_tasks(body.tasks))
    return BatchCreated(batch=batch, episode_ids=episodes)


@router.post("/upload", status_code=201)
async def upload_batch(
    core: State, _: Admin,
    file: Annotated[UploadFile, File(description="a task JSON file or a JSONL file of tasks")],
    rollouts: Annotated[int, Form()] = 1,
    priority: Annotated[int, Form()] = 0,
    max_attempts: Annotated[int, Form()] = 3,
    name: Annotated[str | None, Form()] = None,
) -> BatchCreated:
    """Create a batch from an uploaded task file (JSON object, JSON list or JSONL)."""
    raw = (await file.read()).decode("utf-8", errors="replace")
    try:
        if (file.filename or "").endswith(".jsonl"):
            docs = [json.loads(line) for line in raw.splitlines() if line.strip()]
        else:
            parsed = json.loads(raw)
            docs = parsed if isinstance(parsed, list) else [parsed]
    except json.JSONDecodeError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, [
            {"loc": ["body", "file"], "msg": f"not valid JSON: {exc.msg} (line {exc.lineno})",
             "type": "json_invalid"}]) from exc
    try:
        spec = BatchCreate(name=name or file.filename, tasks=docs, rollouts=rollouts,
                           priority=priority, max_attempts=max_attempts)
    except ValidationError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                             for e in exc.errors()]) from exc
    batch, episodes = await batches.create(core.engine, core.pg, core.queue, spec,
                                           _parse_tasks(docs, file.filename))
    return BatchCreated(batch=batch, episode_ids=episodes)


@router.get("")
async def list_batches(core: State, _: Reader, limit: Annotated[int, Query(ge=1, le=500)] = 50,
                       offset: Annotated[int, Query(ge=0)] = 0) -> BatchList:
    """List batches, newest first, with progress."""
    items, total = await batches.list_batches(core.engine, limit=limit, offset=offset)
    return BatchList(items=items, total=total)


@router.get("/{batch_id}")
async def get_batch(batch_id: uuid.UUID, core: State, _: Reader) -> Batch:
    """One batch with progress."""
    return await batches.get(core.engine, batch_id)


@router.post("/{batch_id}/cancel")
async def cancel_batch(batch_id: uuid.UUID, core: State, _: Admin) -> Batch:
    """Cancel every queued or running episode of the batch."""
    return await batches.cancel(core.engine, core.pg, core.queue, batch_id)
