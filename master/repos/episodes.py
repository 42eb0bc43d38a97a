"""The ``episodes`` table: reads with their steps, outcomes for the scores, verdicts, the
judged trajectories of the stage-2 export and the dashboard's live slots and judge rates."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from coda.contracts.master_api import JudgeRate, LiveSlot
from coda.contracts.records import Episode, EpisodeStatus, JudgedTrajectory, Step
from coda.contracts.services_api import BASE_VERSION
from coda.contracts.training import Verdict
from coda.scoring import Outcome
from master.db.pg import Conn, page
from master.db.statuses import FINISHED_EPISODES
from master.errors import BatchNotFound
from master.repos import steps as step_rows

_COLS = ("id, batch_id, job_id, task_id, app, rollout, status, success, score, answer, error, "
         "attempts, planner_version, created_at, started_at, finished_at")


def _episode(r: asyncpg.Record, steps: list[Step] | None = None, *,
             instruction: str | None = None, verdict: dict[str, Any] | None = None) -> Episode:
    return Episode(instruction=instruction,
                   verdict=Verdict.model_validate(verdict) if verdict is not None else None,
                   id=r["id"], batch_id=r["batch_id"], job_id=r["job_id"],
                   task_id=r["task_id"], app=r["app"], rollout=r["rollout"],
                   status=EpisodeStatus(r["status"]), success=r["success"], score=r["score"],
                   answer=r["answer"], error=r["error"], attempts=r["attempts"],
                   planner_version=r["planner_version"], created_at=r["created_at"],
                   started_at=r["started_at"], finished_at=r["finished_at"], steps=steps)


async def list_page(conn: Conn, *, batch_id: uuid.UUID | None, status: EpisodeStatus | None,
                    app: str | None, limit: int, offset: int) -> tuple[list[Episode], int]:
    rows, total = await page(
        conn, _COLS, "episodes",
        [("batch_id = {}", batch_id), ("status = {}", status.value if status else None),
         ("app = {}", app)], order="updated_at desc, id", limit=limit, offset=offset)
    return [_episode(r) for r in rows], total


async def get(conn: Conn, episode_id: uuid.UUID, *, with_steps: bool) -> Episode:
    row = await conn.fetchrow(
        f"select {_COLS}, verdict, (select t.spec ->> 'instruction' from tasks t "
        "where t.id = episodes.task_row_id) as instruction from episodes where id = $1",
        episode_id)
    if row is None:
        raise BatchNotFound(f"episode {episode_id}")
    steps = await step_rows.of_episode(conn, episode_id) if with_steps else None
    return _episode(row, steps, instruction=row["instruction"], verdict=row["verdict"])


async def version_outcomes(conn: Conn, batch_id: uuid.UUID | None) -> list[tuple[str, bool]]:
    """(planner version, solved) of the finished rollouts (as :func:`outcomes` counts them),
    in the order the versions first finished one; the base model is ``'base'``."""
    cond, args = ("and batch_id = $2", [batch_id]) if batch_id else ("", [])
    rows = await conn.fetch(
        "select coalesce(planner_version, $1) v, coalesce(success, false) s from episodes "
        f"where {FINISHED_EPISODES} {cond} "
        "order by min(finished_at) over (partition by planner_version), finished_at",
        BASE_VERSION, *args)
    return [(r["v"], r["s"]) for r in rows]


async def outcomes(conn: Conn, batch_id: uuid.UUID | None) -> list[Outcome]:
    """Finished rollouts for the Table 1 scores (cancelled ones do not count)."""
    cond, args = ("and batch_id = $1", [batch_id]) if batch_id else ("", [])
    rows = await conn.fetch(
        "select app, task_id, batch_id, coalesce(success, false) s from episodes "
        f"where {FINISHED_EPISODES} {cond}", *args)
    return [Outcome(app=r["app"], task_id=f"{r['batch_id']}:{r['task_id']}", success=r["s"])
            for r in rows]


async def set_verdict(conn: Conn, episode_id: uuid.UUID, verdict: Verdict) -> None:
    await conn.execute("update episodes set verdict = $2, updated_at = now() where id = $1",
                       episode_id, verdict.model_dump(mode="json"))


async def verdict_counts(conn: Conn) -> dict[str, int]:
    row = await conn.fetchrow(
        "select count(*) filter (where verdict is not null) judged, count(*) filter "
        "(where (verdict ->> 'correct')::boolean) correct from episodes")
    return {"judged": row["judged"] or 0, "correct": row["correct"] or 0}


async def judged_trajectories(
    conn: Conn, *, app: str | None, batch_id: uuid.UUID | None,
    planner_version: str | None, correct: bool | None, limit: int, offset: int,
) -> tuple[list[JudgedTrajectory], int]:
    """Completed episodes with a verdict (``correct`` filters on it), steps of the attempt that
    finished, oldest first."""
    rows, total = await page(
        conn, "e.id, e.batch_id, e.task_id, e.app, e.planner_version, e.success, e.verdict, "
        "e.attempts, t.spec ->> 'instruction' as instruction",
        "episodes e join tasks t on t.id = e.task_row_id",
        [("e.status = 'completed'", True), ("e.verdict is not null", True), ("e.app = {}", app),
         ("e.batch_id = {}", batch_id), ("e.planner_version = {}", planner_version),
         ("(e.verdict ->> 'correct')::boolean = {}", correct)],
        order="e.finished_at nulls last, e.id", limit=limit, offset=offset)
    out = [JudgedTrajectory(
        episode_id=r["id"], batch_id=r["batch_id"], task_id=r["task_id"], app=r["app"],
        instruction=r["instruction"] or "", planner_version=r["planner_version"],
        success=r["success"], verdict=Verdict.model_validate(r["verdict"]),
        steps=await step_rows.steps_of_last_attempt(conn, r["id"])) for r in rows]
    return out, total


async def live_slots(conn: Conn, limit: int) -> list[LiveSlot]:
    """Running episodes with their latest step (the screen it saw), newest first."""
    rows = await conn.fetch(
        "select e.id, e.app, e.task_id, e.attempts, w.name worker, s.idx, "
        "s.body ->> 'screenshot' shot, s.body ->> 'thought' thought from episodes e "
        "left join jobs j on j.id = e.job_id left join workers w on w.id = j.worker_id "
        "left join lateral (select idx, body from steps where episode_id = e.id "
        "and attempt = e.attempts order by idx desc limit 1) s on true "
        "where e.status = 'running' order by e.started_at desc limit $1", limit)
    return [LiveSlot(episode_id=r["id"], app=r["app"], task_id=r["task_id"],
                     attempt=r["attempts"], worker=r["worker"], step=r["idx"],
                     screenshot=r["shot"], thought=(r["thought"] or "")[:300] or None)
            for r in rows]


def pass_rate(judged: int, correct: int) -> float | None:
    return round(100 * correct / judged, 2) if judged else None


async def judge_rates(conn: Conn) -> list[JudgeRate]:
    rows = await conn.fetch(
        "select app, count(*) judged, count(*) filter (where (verdict ->> 'correct')"
        "::boolean) correct from episodes where verdict is not null group by app order by app")
    return [JudgeRate(app=r["app"], judged=r["judged"], correct=r["correct"],
                      pass_rate=pass_rate(r["judged"], r["correct"])) for r in rows]
