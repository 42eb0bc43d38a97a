"""Batches of episodes: create (tasks x k rollouts), read with progress, cancel."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from coda.contracts.master_api import BatchCreate
from coda.contracts.records import (
    Batch,
    BatchOptions,
    BatchProgress,
    BatchStatus,
    Episode,
    EpisodeStatus,
    Step,
)
from coda.contracts.training import Verdict
from coda.scoring import Outcome
from coda.tasks import TaskSpec
from master import jobs
from master.queue.redis_queue import RedisQueue


class BatchNotFound(Exception):
    pass


@dataclass
class _Rows:
    """A batch as column arrays (built off the event loop; JSON already encoded)."""

    task_ids: list[uuid.UUID] = field(default_factory=list)
    task_names: list[str] = field(default_factory=list)
    task_apps: list[str] = field(default_factory=list)
    task_specs: list[str] = field(default_factory=list)
    job_ids: list[uuid.UUID] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)
    episode_ids: list[uuid.UUID] = field(default_factory=list)
    episode_tasks: list[int] = field(default_factory=list)  # index into the task arrays
    rollouts: list[int] = field(default_factory=list)


def _rows(batch_id: uuid.UUID, spec: BatchCreate, tasks: list[TaskSpec]) -> _Rows:
    rows = _Rows()
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


INSERT_CHUNK = 2000  # rows per statement: each round trip stays short


async def create(engine: AsyncEngine, pg: asyncpg.Pool, queue: RedisQueue, spec: BatchCreate,
                 tasks: list[TaskSpec]) -> tuple[Batch, list[uuid.UUID]]:
    """One transaction: the batch, its tasks, one episode job and one episode per rollout.
    The rows are built in a thread and inserted a chunk at a time as arrays (``unnest``), so
    a batch of many thousand tasks never holds the event loop for long."""
    batch_id = uuid.uuid4()
    rows = await asyncio.to_thread(_rows, batch_id, spec, tasks)
    async with pg.acquire() as conn, conn.transaction():
        await conn.execute(
            "insert into batches (id, name, status, priority, rollouts, planner_version, options) "
            "values ($1, $2, 'running', $3, $4, $5, $6)",
            batch_id, spec.name, spec.priority, spec.rollouts, spec.planner_version,
            batch_options(spec).model_dump(mode="json"))
        for lo in range(0, len(rows.task_ids), INSERT_CHUNK):
            hi = lo + INSERT_CHUNK
            await conn.execute(
                "insert into tasks (id, batch_id, task_id, app, spec) "
                "select u.id, $1, u.task_id, u.app, u.spec::jsonb "
                "from unnest($2::uuid[], $3::text[], $4::text[], $5::text[]) "
                "as u(id, task_id, app, spec)",
                batch_id, rows.task_ids[lo:hi], rows.task_names[lo:hi], rows.task_apps[lo:hi],
                rows.task_specs[lo:hi])
        for lo in range(0, len(rows.job_ids), INSERT_CHUNK):
            hi = lo + INSERT_CHUNK
            # ordinality: jobs get their seq (FIFO order within a priority) in task order
            await conn.execute(
                "insert into jobs (id, kind, status, priority, payload, attempts, max_attempts, "
                "batch_id) select u.id, 'episode', 'queued', $1, u.payload::jsonb, 0, $2, $3 "
                "from unnest($4::uuid[], $5::text[]) with ordinality as u(id, payload, n) "
                "order by u.n",
                spec.priority, spec.max_attempts, batch_id, rows.job_ids[lo:hi],
                rows.payloads[lo:hi])
            tasks_of = [rows.task_ids[i] for i in rows.episode_tasks[lo:hi]]
            names_of = [rows.task_names[i] for i in rows.episode_tasks[lo:hi]]
            apps_of = [rows.task_apps[i] for i in rows.episode_tasks[lo:hi]]
            await conn.execute(
                "insert into episodes (id, batch_id, task_row_id, job_id, task_id, app, rollout, "
                "status, attempts, planner_version) select u.id, $1, u.task_row, u.job, u.name, "
                "u.app, u.rollout, 'queued', 0, $2 from unnest($3::uuid[], $4::uuid[], "
                "$5::uuid[], $6::text[], $7::text[], $8::int[]) "
                "as u(id, task_row, job, name, app, rollout)",
                batch_id, spec.planner_version, rows.episode_ids[lo:hi], tasks_of,
                rows.job_ids[lo:hi], names_of, apps_of, rows.rollouts[lo:hi])
    await jobs.publish(pg, queue, rows.job_ids)
    batch = await get(engine, batch_id)
    return batch, rows.episode_ids


def batch_options(spec: BatchCreate) -> BatchOptions:
    return BatchOptions(judge=spec.judge, label_rule=spec.label_rule, group_size=spec.group_size)


def _progress(counts: dict[str, int], succeeded: int) -> BatchProgress:
    p = BatchProgress(succeeded=succeeded, total=sum(counts.values()))
    for status, n in counts.items():
        setattr(p, status, n)
    return p


async def _batches(engine: AsyncEngine, where: str, params: dict[str, Any],
                   limit: int = 50, offset: int = 0) -> tuple[list[Batch], int]:
    async with engine.connect() as conn:
        total = (await conn.execute(text(f"select count(*) from batches {where}"), params)).scalar()
        rows = (await conn.execute(text(
            f"select * from batches {where} order by created_at desc limit :lim offset :off"),
            {**params, "lim": limit, "off": offset})).all()
        ids = [r.id for r in rows]
        counts = (await conn.execute(text(
            "select batch_id, status, count(*) n, count(*) filter (where success) s "
            "from episodes where batch_id = any(:ids) group by batch_id, status"),
            {"ids": ids})).all()
    per: dict[uuid.UUID, dict[str, int]] = {i: {} for i in ids}
    succ: dict[uuid.UUID, int] = dict.fromkeys(ids, 0)
    for c in counts:
        per[c.batch_id][c.status] = c.n
        succ[c.batch_id] += c.s
    out = []
    for r in rows:
        prog = _progress(per[r.id], succ[r.id])
        status = BatchStatus(r.status)
        if status is BatchStatus.RUNNING and prog.total and prog.queued + prog.running == 0:
            status = BatchStatus.FINISHED
        out.append(Batch(id=r.id, name=r.name, status=status, priority=r.priority,
                         rollouts=r.rollouts, planner_version=r.planner_version,
                         created_at=r.created_at, progress=prog,
                         options=BatchOptions.model_validate(r.options or {})))
    return out, int(total or 0)


async def get(engine: AsyncEngine, batch_id: uuid.UUID) -> Batch:
    found, _ = await _batches(engine, "where id = :id", {"id": batch_id}, limit=1)
    if not found:
        raise BatchNotFound(str(batch_id))
    return found[0]


async def list_batches(engine: AsyncEngine, *, limit: int, offset: int) -> tuple[list[Batch], int]:
    return await _batches(engine, "", {}, limit=limit, offset=offset)


async def cancel(engine: AsyncEngine, pg: asyncpg.Pool, queue: RedisQueue,
                 batch_id: uuid.UUID) -> Batch:
    await get(engine, batch_id)
    async with engine.begin() as conn:
        await conn.execute(text("update batches set status = 'cancelled' where id = :id"),
                           {"id": batch_id})
    await jobs.cancel_jobs(pg, queue, batch_id=batch_id)
    return await get(engine, batch_id)


def _episode(r: Any, steps: list[Step] | None = None, *, instruction: str | None = None,
             verdict: dict[str, Any] | None = None) -> Episode:
    return Episode(instruction=instruction,
                   verdict=Verdict.model_validate(verdict) if verdict is not None else None,
                   id=r.id, batch_id=r.batch_id, job_id=r.job_id, task_id=r.task_id, app=r.app,
                   rollout=r.rollout, status=EpisodeStatus(r.status), success=r.success,
                   score=r.score, answer=r.answer, error=r.error, attempts=r.attempts,
                   planner_version=r.planner_version, created_at=r.created_at,
                   started_at=r.started_at, finished_at=r.finished_at, steps=steps)


_EP_COLS = ("id, batch_id, job_id, task_id, app, rollout, status, success, score, answer, error, "
            "attempts, planner_version, created_at, started_at, finished_at")


async def list_episodes(engine: AsyncEngine, *, batch_id: uuid.UUID | None,
                        status: EpisodeStatus | None, app: str | None, limit: int,
                        offset: int) -> tuple[list[Episode], int]:
    conds: list[str] = []
    params: dict[str, Any] = {"lim": limit, "off": offset}
    for col, val in (("batch_id", batch_id), ("status", status), ("app", app)):
        if val is not None:
            conds.append(f"{col} = :{col}")
            params[col] = val.value if isinstance(val, EpisodeStatus) else val
    where = ("where " + " and ".join(conds)) if conds else ""
    async with engine.connect() as conn:
        total = (await conn.execute(text(f"select count(*) from episodes {where}"),
                                    params)).scalar()
        rows = (await conn.execute(text(
            f"select {_EP_COLS} from episodes {where} order by updated_at desc, id "
            "limit :lim offset :off"), params)).all()
    return [_episode(r) for r in rows], int(total or 0)


async def get_episode(engine: AsyncEngine, episode_id: uuid.UUID, *, with_steps: bool) -> Episode:
    async with engine.connect() as conn:
        row = (await conn.execute(text(
            f"select {_EP_COLS}, verdict, (select t.spec ->> 'instruction' from tasks t "
            "where t.id = episodes.task_row_id) as instruction from episodes where id = :id"),
            {"id": episode_id})).first()
        if row is None:
            raise BatchNotFound(f"episode {episode_id}")
        steps = None
        if with_steps:
            srows = (await conn.execute(text(
                "select body, created_at from steps where episode_id = :id "
                "order by attempt, idx"), {"id": episode_id})).all()
            steps = [Step.model_validate({**s.body, "created_at": s.created_at}) for s in srows]
    return _episode(row, steps, instruction=row.instruction, verdict=row.verdict)


async def outcomes(engine: AsyncEngine, batch_id: uuid.UUID | None) -> list[Outcome]:
    """Finished rollouts for the Table 1 scores (cancelled ones do not count)."""
    where = "and batch_id = :b" if batch_id else ""
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select app, task_id, batch_id, coalesce(success, false) s from episodes "
            f"where status in ('completed', 'failed') {where}"),
            {"b": batch_id} if batch_id else {})).all()
    return [Outcome(app=r.app, task_id=f"{r.batch_id}:{r.task_id}", success=r.s) for r in rows]
