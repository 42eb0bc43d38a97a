"""What a master process holds: connections and what it remembers of them, never job state."""

from __future__ import annotations

import asyncio
import uuid
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
from master.repos import workers
from master.settings import MasterSettings

if TYPE_CHECKING:
    from master.tokens import MasterTokenAuth


class KnownWorkers:
    """The workers this process has found registered (a worker is never deleted): a lease
    asks the database about a worker once, not at every call. Forgotten all at once past
    ``limit``."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.ids: set[uuid.UUID] = set()

    async def registered(self, pg: asyncpg.Pool, worker_id: uuid.UUID) -> bool:
        if worker_id in self.ids:
            return True
        if not await workers.exists(pg, worker_id):
            return False
        if len(self.ids) >= self.limit:
            self.ids.clear()
        self.ids.add(worker_id)
        return True


@dataclass
class AppState:
    settings: MasterSettings
    pg: asyncpg.Pool
    redis: aioredis.Redis
    queue: RedisQueue
    store: ArtifactStore
    auth: MasterTokenAuth  # the tokens, less the revoked ones (master.tokens)
    metrics: MasterMetrics | None = None
    coverage: CoverageReport | None = None  # CODA_COVERAGE_FILE, read at start
    clock: Clock = field(default_factory=Clock)  # lease and heartbeat times
    stopping: asyncio.Event = field(default_factory=asyncio.Event)  # set on SIGTERM / SIGINT
    supervised: Callable[[], list[SupervisedChild]] | None = None  # under `coda up`
    known_workers: KnownWorkers = field(default_factory=KnownWorkers)  # the lease's check


async def get_state(request: Request) -> AppState:
    core: AppState = request.app.state.core
    return core


State = Annotated[AppState, Depends(get_state)]
