"""Batches: submit tasks x k rollouts, read progress, cancel."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, HTTPException, Query, Response, UploadFile, status
from pydantic import ValidationError

from coda.contracts.master_api import (
    MAX_ATTEMPTS,
    MAX_PRIORITY,
    MAX_ROLLOUTS,
    BatchCreate,
    BatchCreated,
    BatchList,
    VersionRateList,
)
from coda.contracts.records import MAX_OFFSET, NAME_MAX, Batch
from coda.service import error_responses
from coda.tasks import TaskLoadError, TaskSpec, parse_task
from master import batches, idempotency
from master import status as status_data
from master.auth import Admin, Reader
from master.idempotency import IdempotencyKey
from master.repos import batches as batch_rows
from master.state import State
from master.taskfile import check_text, read_task_file

router = APIRouter(prefix="/v1/batches", tags=["batches"])
MAX_ERRORS = 100  # a response lists at most this many refused tasks


def _unprocessable(errors: list[dict[str, Any]]) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, errors)


def parse_tasks(docs: list[dict[str, Any]], filename: str | None = None) -> list[TaskSpec]:
    """Task documents -> specs (CPU work: callers run it in a thread). A raw ScienceBoard
    document gets its id from the uploaded file name (one document) or from its content."""
    tasks, errors = [], []
    path = filename if len(docs) == 1 else None
    for i, doc in enumerate(docs):
        try:
            tasks.append(parse_task(doc, path=path))
        except TaskLoadError as exc:
            errors.append({"loc": ["body", "tasks", i], "msg": f"tasks[{i}]: {exc}",
                           "type": "task_invalid"})
    if errors:
        raise _unprocessable(errors[:MAX_ERRORS])
    dup = sorted(i for i, n in Counter(t.id for t in tasks).items() if n > 1)
    if dup:
        shown = ", ".join(dup[:20]) + (f" and {len(dup) - 20} more" if len(dup) > 20 else "")
        raise _unprocessable([{"loc": ["body", "tasks"], "msg": f"duplicate task ids: {shown}",
                               "type": "duplicate"}])
    return tasks


def _created(made: batches.Created, response: Response) -> BatchCreated:
    if made.replayed:
        idempotency.replayed(response)
    return BatchCreated(batch=made.batch, episode_ids=made.episode_ids)


@router.post("", status_code=201)
async def create_batch(body: BatchCreate, core: State, _: Admin, response: Response,
                       key: IdempotencyKey = None) -> BatchCreated:
    """Create a batch: every task runs ``rollouts`` times. A retry with the same
    ``Idempotency-Key`` gets the batch the first request created, never a second one."""
    tasks = await asyncio.to_thread(parse_tasks, body.tasks)
    made = await batches.create(core.pg, core.queue, body, tasks, key=key,
                                digest=idempotency.digest(body.model_dump(mode="json")))
    return _created(made, response)


@router.post("/upload", status_code=201)
async def upload_batch(
    core: State, _: Admin, response: Response,
    file: Annotated[UploadFile, File(description="a task JSON file or a JSONL file of tasks")],
    rollouts: Annotated[int, Form(ge=1, le=MAX_ROLLOUTS)] = 1,
    priority: Annotated[int, Form(ge=-MAX_PRIORITY, le=MAX_PRIORITY)] = 0,
    max_attempts: Annotated[int, Form(ge=1, le=MAX_ATTEMPTS)] = 3,
    name: Annotated[str | None, Form(max_length=NAME_MAX)] = None,
    key: IdempotencyKey = None,
) -> BatchCreated:
    """Create a batch from an uploaded task file (JSON object, JSON list or JSONL); the
    ``Idempotency-Key`` as for ``POST /v1/batches``."""
    filename = check_text(("body", "file", "filename"), file.filename or None)
    check_text(("body", "name"), name)
    raw = await file.read()
    docs = await asyncio.to_thread(read_task_file, raw,
                                   jsonl=(filename or "").endswith(".jsonl"))
    try:
        spec = BatchCreate(name=name or (filename or "")[:NAME_MAX] or None, tasks=docs,
                           rollouts=rollouts, priority=priority, max_attempts=max_attempts)
    except ValidationError as exc:
        raise _unprocessable([{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                              for e in exc.errors(include_input=False)]) from exc
    tasks = await asyncio.to_thread(parse_tasks, docs, filename)
    made = await batches.create(core.pg, core.queue, spec, tasks, key=key,
                                digest=idempotency.digest(raw, filename, spec.model_dump(
                                    mode="json", exclude={"tasks"})))
    return _created(made, response)


@router.get("")
async def list_batches(core: State, _: Reader, limit: Annotated[int, Query(ge=1, le=500)] = 50,
                       offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0) -> BatchList:
    """List batches, newest first, with progress."""
    items, total = await batch_rows.list_page(core.pg, limit=limit, offset=offset)
    return BatchList(items=items, total=total)


@router.get("/{batch_id}", responses=error_responses(404))
async def get_batch(batch_id: uuid.UUID, core: State, _: Reader) -> Batch:
    """One batch with progress."""
    return await batches.get(core.pg, batch_id)


@router.post("/{batch_id}/cancel", responses=error_responses(404))
async def cancel_batch(batch_id: uuid.UUID, core: State, _: Admin) -> Batch:
    """Cancel every queued or running episode of the batch."""
    return await batches.cancel(core.pg, core.queue, batch_id)


@router.get("/{batch_id}/versions", responses=error_responses(404))
async def batch_versions(batch_id: uuid.UUID, core: State, _: Reader) -> VersionRateList:
    """Success rate per planner version of the batch's finished rollouts, with 95 % Wilson
    intervals (versions in the order they first finished one)."""
    await batches.get(core.pg, batch_id)  # 404 for an unknown batch
    return VersionRateList(items=await status_data.version_rates(core.pg, batch_id))
