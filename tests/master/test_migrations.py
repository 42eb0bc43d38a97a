"""The Alembic migrations build exactly the schema the models describe, and run down again."""

from __future__ import annotations

import asyncio
import json
import uuid

import asyncpg
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from coda.contracts.history import HistoryStep, ImageRef
from coda.contracts.records import ScreenSize, Step, StepLabel, StepTimings
from coda.contracts.training import Group
from coda.urls import to_plain_postgres_url
from master.db.migrate import alembic_config, upgrade
from master.db.models import Base


def _diff(sync_conn) -> list[object]:  # type: ignore[no-untyped-def]
    ctx = MigrationContext.configure(sync_conn, opts={"compare_type": True})
    return list(compare_metadata(ctx, Base.metadata))


async def test_migrations_match_models_and_downgrade(fresh_database_url: str) -> None:
    await upgrade(fresh_database_url)
    await upgrade(fresh_database_url)  # idempotent: a second replica starting changes nothing
    engine = create_async_engine(fresh_database_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
        await asyncio.to_thread(command.downgrade, alembic_config(fresh_database_url), "base")
        async with engine.connect() as conn:
            assert len(await conn.run_sync(_diff)) >= len(Base.metadata.tables)
    finally:
        await engine.dispose()


OLD_EXTRA = {"screen": {"width": 1280, "height": 720}, "label": "positive",
             "plan": {"thought": "open it", "action_hint": None, "finished": False,
                      "answer": None, "answer_mode": False, "completion_tokens": 12},
             "timings_ms": {k: 1.0 for k in StepTimings.model_fields}}


async def test_typed_steps_migration_moves_extra_and_back(fresh_database_url: str) -> None:
    """0006 moves a step's ``extra`` (screen, plan, timings_ms, label) into its typed fields,
    so an old row reads back as a valid Step; the downgrade restores ``extra``."""
    cfg = alembic_config(fresh_database_url)
    await asyncio.to_thread(command.upgrade, cfg, "0005")
    conn = await asyncpg.connect(to_plain_postgres_url(fresh_database_url))
    try:
        await _old_step_rows(conn)
        await asyncio.to_thread(command.upgrade, cfg, "head")
        full, bare = [json.loads(r["body"]) for r in await conn.fetch(
            "select body from steps order by idx")]
        step = Step.model_validate(full)
        assert "extra" not in full and "extra" not in bare
        assert step.screen == ScreenSize(width=1280, height=720)
        assert step.label is StepLabel.POSITIVE and step.plan is not None
        assert step.plan.thought == "open it" and step.plan.answer is None
        assert step.timings is not None and step.timings.total == 1.0
        assert Step.model_validate(bare) == Step(index=1, thought="no extra")
        await asyncio.to_thread(command.downgrade, cfg, "0005")
        full, bare = [json.loads(r["body"]) for r in await conn.fetch(
            "select body from steps order by idx")]
        assert full["extra"] == OLD_EXTRA and bare["extra"] == {}
        assert not {"screen", "plan", "timings", "label"} & set(full)
    finally:
        await conn.close()


async def _old_step_rows(conn: asyncpg.Connection) -> None:
    """Two steps as the master stored them before 0006: one with every extra, one without."""
    batch, task, job, episode = (uuid.uuid4() for _ in range(4))
    await conn.execute("insert into batches (id, status, priority, rollouts) "
                       "values ($1, 'running', 0, 1)", batch)
    await conn.execute("insert into tasks (id, batch_id, task_id, app, spec) "
                       "values ($1, $2, 't', 'KAlgebra', '{}')", task, batch)
    await conn.execute("insert into jobs (id, kind, status, priority, payload, attempts, "
                       "max_attempts) values ($1, 'episode', 'queued', 0, '{}', 0, 3)", job)
    await conn.execute("insert into episodes (id, batch_id, task_row_id, job_id, task_id, app, "
                       "rollout, status, attempts) values ($1, $2, $3, $4, 't', 'KAlgebra', 0, "
                       "'running', 1)", episode, batch, task, job)
    for idx, body in ((0, {"index": 0, "attempt": 1, "thought": "with extra",
                           "screenshot": "sha256/ab/" + "a" * 64 + ".png",
                           "outcome": "ok", "extra": OLD_EXTRA}),
                      (1, {"index": 1, "thought": "no extra", "outcome": "ok", "extra": {}})):
        await conn.execute("insert into steps (episode_id, attempt, idx, body) "
                           "values ($1, 1, $2, $3::jsonb)", episode, idx, json.dumps(body))


OLD_GROUP = {"state": {"episode_id": None, "step_index": 3, "instruction": "plot x^2",
                       "app": "KAlgebra", "screenshot": "sha256/ab/" + "b" * 64 + ".png",
                       "previous_screenshot": None, "screen_width": 1280, "screen_height": 800,
                       "history": [{"thought": "Thought: open it", "action_text": "click()",
                                    "screenshot": "sha256/ab/" + "a" * 64 + ".png"},
                                   {"thought": "Thought: no screen", "action_text": None,
                                    "screenshot": None}]},
             "target": {"type": "wait", "seconds": 1.0},
             "candidates": [{"plan": "p", "reward": r} for r in (0.0, 1.0)],
             "planner_version": None}


async def test_group_history_migration_types_it_and_drops_the_unfit(
        fresh_database_url: str) -> None:
    """0007 turns a stored group's history screenshots (bare keys) into image references, so
    an old group reads back as a valid Group with the planner's own history shape; a group
    the contracts' bounds refuse (a step index past what its readers hold, a history step
    without a text thought) is dropped as ``unfit``; the downgrade restores the bare keys."""
    cfg = alembic_config(fresh_database_url)
    await asyncio.to_thread(command.upgrade, cfg, "0006")
    conn = await asyncpg.connect(to_plain_postgres_url(fresh_database_url))
    unfit = [{**OLD_GROUP, "state": {**OLD_GROUP["state"], **change}} for change in (
        {"step_index": 32589158477190044731}, {"step_index": -1}, {"step_index": 2.5},
        {"history": [{"thought": 5}]}, {"history": [{"thought": "t", "screenshot": "k"}]})]
    try:
        for n, body in enumerate([OLD_GROUP, *unfit]):
            await conn.execute("insert into groups (id, status, body, created_at) values "
                               "($1, 'ready', $2::jsonb, now() + $3 * interval '1 second')",
                               uuid.uuid4(), json.dumps(body), n)
        await asyncio.to_thread(command.upgrade, cfg, "head")
        rows = await conn.fetch("select status, reason, body from groups order by created_at")
        group = Group.model_validate(json.loads(rows[0]["body"]))
        assert rows[0]["status"] == "ready" and group.state.history == [
            HistoryStep(thought="Thought: open it", action_text="click()",
                        screenshot=ImageRef(ref="sha256/ab/" + "a" * 64 + ".png")),
            HistoryStep(thought="Thought: no screen")]
        assert [(r["status"], r["reason"]) for r in rows[1:]] == [("dropped", "unfit")] * 5
        await asyncio.to_thread(command.downgrade, cfg, "0006")
        old = json.loads(await conn.fetchval(
            "select body from groups order by created_at limit 1"))
        assert old == OLD_GROUP
    finally:
        await conn.close()
