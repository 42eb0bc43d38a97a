"""Training observability (trainer figures per update and planner version) and the judged
trajectories the stage-2 SFT export reads."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, status

from coda.bounds import MAX_METRICS_READ
from coda.contracts.records import JudgedTrajectoryList
from coda.contracts.training import (
    TrainingMetricsList,
    TrainingMetricsReport,
    Verdict,
    VersionTraining,
)
from coda.service import error_responses
from master import jobs, lifecycle
from master.auth import Reader, WorkerAuth
from master.errors import EpisodeNotFound
from master.repos import episodes as episode_rows
from master.repos import training
from master.state import State

router = APIRouter(prefix="/v1", tags=["training"])
Name = Annotated[str | None, Query(max_length=200)]


@router.post("/training/metrics", status_code=204)
async def report_metrics(body: TrainingMetricsReport, core: State, _: WorkerAuth) -> None:
    """Store the figures of one trainer update (reward, loss, KL, clip fraction, ...)."""
    await training.record(core.pg, body)


@router.get("/training/metrics")
async def list_metrics(core: State, _: Reader, run: Name = None, planner_version: Name = None,
                       limit: Annotated[int, Query(ge=1, le=MAX_METRICS_READ)] = 1000,
                       ) -> TrainingMetricsList:
    """The latest updates' figures, oldest first (optionally of one run or version)."""
    return TrainingMetricsList(items=await training.list_metrics(
        core.pg, run=run, planner_version=planner_version, limit=limit))


@router.get("/training/versions")
async def by_version(core: State, _: Reader, run: Name = None) -> list[VersionTraining]:
    """Per planner version: updates trained from it, mean and last figures."""
    items = await training.list_metrics(core.pg, run=run, planner_version=None,
                                        limit=MAX_METRICS_READ)
    return training.summarize(items)


@router.put("/episodes/{episode_id}/verdict", status_code=204, responses=error_responses(404))
async def set_verdict(episode_id: uuid.UUID, body: Verdict, core: State, _: WorkerAuth) -> None:
    """Store the judge's verdict of an episode: its steps are labelled and its positive steps
    get group jobs, as when a judge job completes (once per step, however often it is put)."""
    try:
        async with core.pg.acquire() as conn, conn.transaction():
            _stored, created = await lifecycle.apply_verdict(conn, episode_id, body)
    except EpisodeNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    await jobs.publish(core.pg, core.queue, created)


@router.get("/training/trajectories")
async def trajectories(
    core: State, _: Reader, app: Name = None, batch_id: uuid.UUID | None = None,
    planner_version: Name = None,
    verdict: Literal["correct", "incorrect", "any"] = "correct",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> JudgedTrajectoryList:
    """Completed, judged episodes with their steps (default: those judged correct)."""
    items, total = await episode_rows.judged_trajectories(
        core.pg, app=app, batch_id=batch_id, planner_version=planner_version,
        correct=None if verdict == "any" else verdict == "correct", limit=limit, offset=offset)
    return JudgedTrajectoryList(items=items, total=total)
