"""Batches of episodes: create (tasks x k rollouts), read with progress, cancel."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from coda.contracts.master_api import BatchCreate
from coda.contracts.records import (
    Batch,
    BatchProgress,
    BatchStatus,
    Episode,
    EpisodePayload,
    EpisodeStatus,
    JobKind,
    Step,
)
from coda.scoring import Outcome
from coda.tasks import TaskSpec
from master import jobs
from master.queue.redis_queue import RedisQueue


class BatchNotFound(Exception):
    pass


async def create(engine: AsyncEngine, pg: asyncpg.Pool, queue: RedisQueue, spec: BatchCreate,
                 tasks: list[TaskSpec]) -> tuple[Batch, list[uuid.UUID]]:
    batch_id = uuid.uuid4()
    task_rows, episode_rows, new_jobs = [], [], []
    for task in tasks:
        task_row = uuid.uuid4()
        task_rows.append({"id": task_row, "batch_id": batch_id, "task_id": task.id,
                          "app": task.app, "spec": task.model_dump(mode="json")})
        for k in range(spec.rollouts):
            ep, job = uuid.uuid4(), uuid.uuid4()
            payload = EpisodePayload(episode_id=ep, batch_id=batch_id, rollout=k, task=task,
                                     planner_version=spec.planner_version)
            new_jobs.append(jobs.NewJob(id=job, kind=JobKind.EPISODE,
                                        payload=payload.model_dump(mode="json"),
                                        priority=spec.priority, max_attempts=spec.max_attempts,
                                        batch_id=batch_id))
            episode_rows.append({"id": ep, "batch_id": batch_id, "task_row_id": task_row,
                                 "job_id": job, "task_id": task.id, "app": task.app,
                                 "rollout": k, "planner_version": spec.planner_version})
    async with pg.acquire() as conn, conn.transaction():
        await conn.execute(
            "insert into batches (id, name, status, priority, rollouts, planner_version) "
            "values ($1, $2, 'running', $3, $4, $5)",
            batch_id, spec.name, spec.priority, spec.rollouts, spec.planner_version)
        await conn.executemany(
            "insert into tasks (id, batch_id, task_id, app, spec) values ($1, $2, $3, $4, $5)",
            [(t["id"], t["batch_id"], t["task_id"], t["app"], t["spec"]) for t in task_rows])
        await jobs.insert_jobs(conn, new_jobs)
        await conn.executemany(
            "insert into episodes (id, batch_id, task_row_id, job_id, task_id, app, rollout, "
            "status, attempts, planner_version) values ($1, $2, $3, $4, $5, $6, $7, 'queued', "
            "0, $8)",
            [(e["id"], e["batch_id"], e["task_row_id"], e["job_id"], e["task_id"], e["app"],
              e["rollout"], e["planner_version"]) for e in episode_rows])
    await jobs.publish(pg, queue, [j.id for j in new_jobs])
    batch = await get(engine, batch_id)
    return batch, [uuid.UUID(str(e["id"])) for e in episode_rows]


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
                         created_at=r.created_at, progress=prog))
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


def _episode(r: Any, steps: list[Step] | None = None) -> Episode:
    return Episode(id=r.id, batch_id=r.batch_id, job_id=r.job_id, task_id=r.task_id, app=r.app,
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
        row = (await conn.execute(text(f"select {_EP_COLS} from episodes where id = :id"),
                                  {"id": episode_id})).first()
        if row is None:
            raise BatchNotFound(f"episode {episode_id}")
        steps = None
        if with_steps:
            srows = (await conn.execute(text(
                "select body, created_at from steps where episode_id = :id "
                "order by attempt, idx"), {"id": episode_id})).all()
            steps = [Step.model_validate({**s.body, "created_at": s.created_at}) for s in srows]
    return _episode(row, steps)


async def outcomes(engine: AsyncEngine, batch_id: uuid.UUID | None) -> list[Outcome]:
    """Finished rollouts for the Table 1 scores (cancelled ones do not count)."""
    where = "and batch_id = :b" if batch_id else ""
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select app, task_id, batch_id, coalesce(success, false) s from episodes "
            f"where status in ('completed', 'failed') {where}"),
            {"b": batch_id} if batch_id else {})).all()
    return [Outcome(app=r.app, task_id=f"{r.batch_id}:{r.task_id}", success=r.s) for r in rows]
