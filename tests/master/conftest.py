"""Helpers for master tests: clients bound to a running master, task documents, a PostgreSQL
server of a test's own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from coda.clients.master import MasterClient
from coda.contracts.master_api import BatchCreate, WorkerRegister
from coda.contracts.records import Worker
from coda.procs import free_port
from coda.tasks import load_tasks
from coda_app.embedded.postgres import EmbeddedPostgres

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


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL server of this test's own on a free port (the test stops and starts it)."""
    server = EmbeddedPostgres(tmp_path / "pg-data", port=free_port(), fast=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()
