"""The ``batches`` and ``tasks`` tables (a batch's episode and job rows are written with it)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from coda.contracts.records import Batch, BatchOptions, BatchProgress, BatchStatus
from master.db.pg import Conn, page

INSERT_CHUNK = 2000  # rows per statement: each round trip stays short


@dataclass
class BatchRows:
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


async def insert(conn: asyncpg.Connection, batch_id: uuid.UUID, *, name: str | None,
                 priority: int, rollouts: int, max_attempts: int, planner_version: str | None,
                 options: BatchOptions, rows: BatchRows) -> None:
    """The batch, its tasks, its episode jobs and episodes (call inside a transaction), a
    chunk at a time as arrays (``unnest``)."""
    await conn.execute(
        "insert into batches (id, name, status, priority, rollouts, planner_version, options) "
        "values ($1, $2, 'running', $3, $4, $5, $6)",
        batch_id, name, priority, rollouts, planner_version, options.model_dump(mode="json"))
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
            priority, max_attempts, batch_id, rows.job_ids[lo:hi], rows.payloads[lo:hi])
        tasks_of = [rows.task_ids[i] for i in rows.episode_tasks[lo:hi]]
        names_of = [rows.task_names[i] for i in rows.episode_tasks[lo:hi]]
        apps_of = [rows.task_apps[i] for i in rows.episode_tasks[lo:hi]]
        await conn.execute(
            "insert into episodes (id, batch_id, task_row_id, job_id, task_id, app, rollout, "
            "status, attempts, planner_version) select u.id, $1, u.task_row, u.job, u.name, "
            "u.app, u.rollout, 'queued', 0, $2 from unnest($3::uuid[], $4::uuid[], "
            "$5::uuid[], $6::text[], $7::text[], $8::int[]) "
            "as u(id, task_row, job, name, app, rollout)",
            batch_id, planner_version, rows.episode_ids[lo:hi], tasks_of,
            rows.job_ids[lo:hi], names_of, apps_of, rows.rollouts[lo:hi])


async def set_cancelled(conn: Conn, batch_id: uuid.UUID) -> bool:
    """Mark the batch cancelled; False when there is no such batch."""
    got = await conn.fetchval("update batches set status = 'cancelled' where id = $1 "
                              "returning id", batch_id)
    return got is not None


def _progress(counts: dict[str, int], succeeded: int) -> BatchProgress:
    p = BatchProgress(succeeded=succeeded, total=sum(counts.values()))
    for status, n in counts.items():
        setattr(p, status, n)
    return p


async def _with_progress(conn: Conn, rows: Sequence[asyncpg.Record]) -> list[Batch]:
    ids = [r["id"] for r in rows]
    counts = await conn.fetch(
        "select batch_id, status, count(*) n, count(*) filter (where success) s "
        "from episodes where batch_id = any($1) group by batch_id, status", ids)
    per: dict[uuid.UUID, dict[str, int]] = {i: {} for i in ids}
    succ: dict[uuid.UUID, int] = dict.fromkeys(ids, 0)
    for c in counts:
        per[c["batch_id"]][c["status"]] = c["n"]
        succ[c["batch_id"]] += c["s"]
    out = []
    for r in rows:
        prog = _progress(per[r["id"]], succ[r["id"]])
        status = BatchStatus(r["status"])
        if status is BatchStatus.RUNNING and prog.total and prog.queued + prog.running == 0:
            status = BatchStatus.FINISHED
        out.append(Batch(id=r["id"], name=r["name"], status=status, priority=r["priority"],
                         rollouts=r["rollouts"], planner_version=r["planner_version"],
                         created_at=r["created_at"], progress=prog,
                         options=BatchOptions.model_validate(r["options"] or {})))
    return out


_COLS = "id, name, status, priority, rollouts, planner_version, options, created_at"


async def get(conn: Conn, batch_id: uuid.UUID) -> Batch | None:
    row = await conn.fetchrow(f"select {_COLS} from batches where id = $1", batch_id)
    return (await _with_progress(conn, [row]))[0] if row is not None else None


async def list_page(conn: Conn, *, limit: int, offset: int) -> tuple[list[Batch], int]:
    rows, total = await page(conn, _COLS, "batches", [], order="created_at desc",
                             limit=limit, offset=offset)
    return await _with_progress(conn, rows), total


async def options_of_episode(conn: Conn, column: str, value: Any,
                             *, lock: bool = False) -> asyncpg.Record | None:
    """id, success, batch_id, options, priority of the episode whose ``column`` (``id`` or
    ``job_id``) is ``value``, with its batch's options."""
    assert column in ("id", "job_id")
    return await conn.fetchrow(
        "select e.id, e.success, e.batch_id, b.options, b.priority from episodes e "
        f"join batches b on b.id = e.batch_id where e.{column} = $1"
        + (" for update of e" if lock else ""), value)
