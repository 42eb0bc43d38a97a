"""The dashboard's episode replay: the episode with its steps and the rewards of the groups
sampled at them."""

from __future__ import annotations

import uuid

from coda.contracts.master_api import EpisodeReplay, StepReward
from master.db.pg import Conn
from master.repos import episodes as episode_rows
from master.repos import groups as group_rows

MAX_LIVE = 64


async def replay(conn: Conn, episode_id: uuid.UUID) -> EpisodeReplay:
    """The episode (404 when unknown) and the groups sampled at its steps."""
    episode = await episode_rows.get(conn, episode_id, with_steps=True)
    rows = await group_rows.rewards_of_episode(conn, episode_id)
    return EpisodeReplay(episode=episode, rewards=[
        StepReward(step_index=int(r["idx"]), status=r["status"], reason=r["reason"],
                   candidates=r["n"], reward_mean=round(r["mean"] or 0.0, 4),
                   reward_max=r["mx"] or 0.0) for r in rows])
