"""Episodes and their steps."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from coda.contracts.master_api import EpisodeList, EpisodeReplay
from coda.contracts.records import MAX_OFFSET, Episode, EpisodeStatus
from coda.service import error_responses
from master import dashboard
from master.auth import Reader
from master.repos import episodes as episode_rows
from master.state import State

router = APIRouter(prefix="/v1/episodes", tags=["episodes"])


@router.get("")
async def list_episodes(
    core: State, _: Reader, batch_id: uuid.UUID | None = None,
    status: EpisodeStatus | None = None, app: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> EpisodeList:
    """List episodes, most recently changed first."""
    items, total = await episode_rows.list_page(core.pg, batch_id=batch_id, status=status,
                                                app=app, limit=limit, offset=offset)
    return EpisodeList(items=items, total=total)


@router.get("/{episode_id}", responses=error_responses(404))
async def get_episode(episode_id: uuid.UUID, core: State, _: Reader,
                      steps: bool = True) -> Episode:
    """One episode, with its steps (every attempt) unless ``steps=false``."""
    return await episode_rows.get(core.pg, episode_id, with_steps=steps)


@router.get("/{episode_id}/replay", responses=error_responses(404))
async def get_replay(episode_id: uuid.UUID, core: State, _: Reader) -> EpisodeReplay:
    """The episode with its steps and verdict, and the rewards of the GRPO groups sampled at
    its steps (the dashboard's replay, as JSON)."""
    return await dashboard.replay(core.pg, episode_id)
