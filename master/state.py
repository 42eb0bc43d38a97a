"""What a master process holds: connections, never job state."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

import asyncpg
import redis.asyncio as aioredis
from fastapi import Depends, Request

from coda.artifacts import ArtifactStore
from coda.contracts.coverage import CoverageReport
from coda.contracts.master_api import SupervisedChild
from master.clock import Clock
from master.metrics import MasterMetrics
from master.queue.redis_queue import RedisQueue
from master.settings import MasterSettings

if TYPE_CHECKING:
    from master.tokens import MasterTokenAuth


@dataclass
class AppState:
    settings: MasterSettings
    pg: asyncpg.Pool
    redis: aioredis.Redis
    queue: RedisQueue
    store: ArtifactStore
    metrics: MasterMetrics | None = None
    coverage: CoverageReport | None = None  # CODA_COVERAGE_FILE, read at start
    clock: Clock = field(default_factory=Clock)  # lease and heartbeat times
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set on SIGTERM / SIGINT
    supervised: Callable[[], list[SupervisedChild]] | None = None  # under `coda up`
    auth: MasterTokenAuth | None = None  # the tokens, less the revoked ones (master.tokens)


async def get_state(request: Request) -> AppState:
    core: AppState = request.app.state.core
    return core


State = Annotated[AppState, Depends(get_state)]
