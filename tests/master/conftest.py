"""Helpers for master tests: clients bound to a running master, task documents."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coda.clients.master import MasterClient
from coda.contracts.master_api import BatchCreate, WorkerRegister
from coda.contracts.records import Worker
from coda.tasks import load_tasks

SCIENCEBOARD = Path(__file__).resolve().parents[2] / "examples" / "scienceboard"


def task_docs(n: int, app: str = "KAlgebra") -> list[dict[str, Any]]:
    return [t.to_native() for t in load_tasks(SCIENCEBOARD / "VM" / app)[:n]]


@pytest.fixture
async def admin(master) -> AsyncIterator[MasterClient]:  # type: ignore[no-untyped-def]
    async with MasterClient(master.url, token=master.admin_token, retries=1) as c:
        yield c


@pytest.fixture
async def wclient(master) -> AsyncIterator[MasterClient]:  # type: ignore[no-untyped-def]
    async with MasterClient(master.url, token=master.worker_token, retries=1) as c:
        yield c


@pytest.fixture
async def worker(wclient: MasterClient) -> Worker:
    return await wclient.register_worker(WorkerRegister(name="test-worker", slots=8))


async def submit(admin: MasterClient, n_tasks: int = 2, **kw: Any) -> Any:
    return await admin.create_batch(BatchCreate(tasks=task_docs(n_tasks), **kw))
