"""Queries behind the dashboard: live slots, judge pass rates per app, episode replays."""

from __future__ import annotations

import uuid

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from coda.contracts.master_api import EpisodeReplay, JudgeRate, LiveSlot, StepReward
from master import batches

MAX_LIVE = 64


async def live_slots(engine: AsyncEngine, limit: int = MAX_LIVE) -> list[LiveSlot]:
    """Running episodes with their latest step (the screen it saw), newest first."""
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select e.id, e.app, e.task_id, e.attempts, w.name worker, s.idx, "
            "s.body ->> 'screenshot' shot, s.body ->> 'thought' thought from episodes e "
            "left join jobs j on j.id = e.job_id left join workers w on w.id = j.worker_id "
            "left join lateral (select idx, body from steps where episode_id = e.id "
            "and attempt = e.attempts order by idx desc limit 1) s on true "
            "where e.status = 'running' order by e.started_at desc limit :n"),
            {"n": limit})).all()
    return [LiveSlot(episode_id=r.id, app=r.app, task_id=r.task_id, attempt=r.attempts,
                     worker=r.worker, step=r.idx, screenshot=r.shot,
                     thought=(r.thought or "")[:300] or None) for r in rows]


def pass_rate(judged: int, correct: int) -> float | None:
    return round(100 * correct / judged, 2) if judged else None


async def judge_rates(engine: AsyncEngine) -> list[JudgeRate]:
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select app, count(*) judged, count(*) filter (where (verdict ->> 'correct')"
            "::boolean) correct from episodes where verdict is not null group by app "
            "order by app"))).all()
    return [JudgeRate(app=r.app, judged=r.judged, correct=r.correct,
                      pass_rate=pass_rate(r.judged, r.correct)) for r in rows]


async def replay(engine: AsyncEngine, episode_id: uuid.UUID) -> EpisodeReplay:
    """The episode (404 when unknown) and the groups sampled at its steps."""
    episode = await batches.get_episode(engine, episode_id, with_steps=True)
    async with engine.connect() as conn:
        rows = (await conn.execute(text(
            "select status, reason, (body -> 'state' ->> 'step_index')::int idx, "
            "(select count(*) from jsonb_array_elements(body -> 'candidates')) n, "
            "(select avg((c ->> 'reward')::float) from jsonb_array_elements("
            "body -> 'candidates') c) mean, (select max((c ->> 'reward')::float) from "
            "jsonb_array_elements(body -> 'candidates') c) mx from groups "
            "where body -> 'state' ->> 'episode_id' = :e order by idx"),
            {"e": str(episode_id)})).all()
    return EpisodeReplay(episode=episode, rewards=[
        StepReward(step_index=r.idx, status=r.status, reason=r.reason, candidates=r.n,
                   reward_mean=round(r.mean or 0.0, 4), reward_max=r.mx or 0.0)
        for r in rows])
