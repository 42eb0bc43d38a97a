"""Batches of episodes: create (tasks x k rollouts), read with progress, cancel."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass

import asyncpg

from coda.contracts.master_api import BatchCreate
from coda.contracts.records import Batch, BatchOptions
from coda.tasks import TaskSpec
from master import idempotency, jobs
from master.db.pg import Conn
from master.errors import BatchNotFound
from master.queue.redis_queue import RedisQueue
from master.repos import batches as batch_rows
from master.repos.batches import BatchRows


def build_rows(batch_id: uuid.UUID, spec: BatchCreate, tasks: list[TaskSpec]) -> BatchRows:
    """The rows of a new batch (pure): its tasks, and per rollout one episode and its job."""
    rows = BatchRows()
    version = json.dumps(spec.planner_version)
    for n, task in enumerate(tasks):
        rows.task_ids.append(uuid.uuid4())
        rows.task_names.append(task.id)
        rows.task_apps.append(task.app)
        task_json = task.model_dump_json()
        rows.task_specs.append(task_json)
        for k in range(spec.rollouts):
            ep, job = uuid.uuid4(), uuid.uuid4()
            # EpisodePayload's JSON, written around the task's JSON (dumped once per task)
            rows.payloads.append(
                f'{{"episode_id":"{ep}","batch_id":"{batch_id}","rollout":{k},'
                f'"task":{task_json},"planner_version":{version}}}')
            rows.job_ids.append(job)
            rows.episode_ids.append(ep)
            rows.episode_tasks.append(n)
            rows.rollouts.append(k)
    return rows


@dataclass
class Created:
    batch: Batch
    episode_ids: list[uuid.UUID]
    replayed: bool = False
    """The request's idempotency key was taken: this is the batch its first request made."""


async def create(pg: asyncpg.Pool, queue: RedisQueue, spec: BatchCreate, tasks: list[TaskSpec],
                 *, key: str | None = None, digest: str = "") -> Created:
    """One transaction: the batch, its tasks, one episode job and one episode per rollout
    (and, with an idempotency ``key``, what the request answers). The rows are built in a
    thread and inserted a chunk at a time as arrays, so a batch of many thousand tasks never
    holds the event loop for long. Once committed the batch stands: its jobs are pushed to
    Redis, or by the reconciler when Redis does not answer (:func:`master.jobs.after_commit`).
    A ``key`` taken before returns the batch its first request made, and creates nothing."""
    batch_id = uuid.uuid4()
    rows = await asyncio.to_thread(build_rows, batch_id, spec, tasks)
    async with pg.acquire() as conn, conn.transaction():
        if key is not None:
            earlier = await idempotency.reserve(conn, "batches", key, digest)
            if earlier is not None:
                return Created(await get(conn, uuid.UUID(earlier["batch_id"])),
                               [uuid.UUID(e) for e in earlier["episode_ids"]], replayed=True)
        await batch_rows.insert(conn, batch_id, name=spec.name, priority=spec.priority,
                                rollouts=spec.rollouts, max_attempts=spec.max_attempts,
                                planner_version=spec.planner_version,
                                options=batch_options(spec), rows=rows)
        if key is not None:
            await idempotency.answer(conn, "batches", key, {
                "batch_id": str(batch_id), "episode_ids": [str(e) for e in rows.episode_ids]})
    await jobs.after_commit("publish", jobs.publish(pg, queue, rows.job_ids))
    return Created(await get(pg, batch_id), rows.episode_ids)


def batch_options(spec: BatchCreate) -> BatchOptions:
    return BatchOptions(judge=spec.judge, label_rule=spec.label_rule, group_size=spec.group_size)


async def get(pg: Conn, batch_id: uuid.UUID) -> Batch:
    found = await batch_rows.get(pg, batch_id)
    if found is None:
        raise BatchNotFound(str(batch_id))
    return found


async def cancel(pg: asyncpg.Pool, queue: RedisQueue, batch_id: uuid.UUID) -> Batch:
    """Cancel every queued or running episode of the batch (atomically: see
    :func:`master.jobs.cancel_batch`)."""
    if await jobs.cancel_batch(pg, queue, batch_id) is None:
        raise BatchNotFound(str(batch_id))
    return await get(pg, batch_id)
