"""The master's answers while its stores are away are true, over real HTTP, with faults injected
from outside on servers of the test's own (never the shared ones):

- Redis stopped while ``coda submit`` runs twelve times (the CLI as a user runs it; six start
  before it stops, six after, so some always meet it away however fast the machine): every
  submission creates one batch, and one only (21 were made for 12 submissions before); a
  submission the CLI reports as failed made none; once Redis is back the reconciler queues
  every episode, and each is leased once.
- PostgreSQL stopped: every request is answered 503 with ``Retry-After`` naming the store,
  never 500; back, the same requests succeed.
- A name that does not resolve (what a compose network answers while a store's container
  restarts) is a 503 too, and so is each error a pool's queries raise while PostgreSQL restarts.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from coda.procs import free_port
from coda_app.embedded.postgres import EmbeddedPostgres
from coda_app.embedded.redis import EmbeddedRedis
from master import unavailable
from tests.fixtures.faults import Stopwatch, record
from tests.fixtures.master import EXAMPLES, MasterProcess, master_env
from tests.fixtures.waiting import wait_for

CODA = Path(sys.executable).parent / "coda"
SUBMITS = 12


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of this test's own on a free port (the test stops and starts it)."""
    server = EmbeddedRedis(tmp_path / "redis-data", port=free_port(), fast=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _master(tmp_path: Path, database_url: str, redis_url: str) -> MasterProcess:
    env = master_env(database_url, redis_url, tmp_path / "artifacts",
                     CODA_LEASE_TTL_S="60", CODA_RECONCILE_INTERVAL_S="1")
    m = MasterProcess(env=env, log_path=tmp_path / "master.log")
    m.start()
    return m


def _admin(m: MasterProcess) -> httpx.Client:
    return httpx.Client(base_url=m.url, timeout=60,
                        headers={"authorization": f"Bearer {m.admin_token}"})


def _submit(m: MasterProcess, task: Path, name: str, out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        return subprocess.Popen([str(CODA), "submit", str(task), "--url", m.url, "--token",
                                 m.admin_token, "--name", name], stdout=sink,
                                stderr=subprocess.STDOUT)


def test_a_batch_submitted_while_redis_is_away_is_created_once_and_queued_when_it_is_back(
        fresh_database_url: str, own_redis: EmbeddedRedis, tmp_path: Path) -> None:
    m = _master(tmp_path, fresh_database_url, own_redis.url)
    try:
        task = EXAMPLES / "VM" / "KAlgebra" / "C-01.json"
        admin = _admin(m)
        half = SUBMITS // 2
        runs = [_submit(m, task, f"sub-{i}", tmp_path / f"submit-{i}.out") for i in range(half)]
        wait_for(lambda: admin.get("/v1/batches").json()["total"] >= 2,
                 "two submissions through before Redis stops", 120, logs=lambda: m.log_path
                 .read_text() if m.log_path else "")
        watch = Stopwatch()
        own_redis.stop()  # the first half's rest meet Redis going away, the second half its
        runs += [_submit(m, task, f"sub-{i}", tmp_path / f"submit-{i}.out")  # absence
                 for i in range(half, SUBMITS)]
        for run in runs:
            run.wait(300)
        batches = admin.get("/v1/batches", params={"limit": 100}).json()["items"]
        names = [b["name"] for b in batches]
        for i, run in enumerate(runs):
            said = (tmp_path / f"submit-{i}.out").read_text()
            if run.returncode == 0:
                assert names.count(f"sub-{i}") == 1, (i, said, names)
                assert json.loads(said.splitlines()[-1])["batch_id"] in {b["id"] for b in batches}
            else:  # a failure it reports created nothing
                assert f"sub-{i}" not in names, (i, said)
        assert len(names) == len(set(names)) == sum(r.returncode == 0 for r in runs) == SUBMITS
        log = m.log_path.read_text() if m.log_path else ""
        assert log.count("queue.deferred") >= 1, log[-3000:]  # some were made while it was away
        away = watch.s()
        own_redis.start()  # back (its data kept): the reconciler pushes what it missed
        watch.restart()
        worker = httpx.Client(base_url=m.url, timeout=60,
                              headers={"authorization": f"Bearer {m.worker_token}"})
        wid = worker.post("/v1/workers", json={"name": "w", "slots": 64}).json()["id"]
        leased: list[dict[str, Any]] = []

        def all_leased() -> bool:
            leased.extend(worker.post("/v1/jobs/lease", json={
                "worker_id": wid, "capacity": 64}).json()["jobs"])
            return len(leased) >= SUBMITS

        wait_for(all_leased, "every episode queued and leased", 120)
        assert len({j["id"] for j in leased}) == len(leased) == SUBMITS
        assert {j["payload"]["batch_id"] for j in leased} == {b["id"] for b in batches}
        record("redis_stopped_during_submits", submissions=SUBMITS, batches=len(names),
               made_while_redis_away=log.count("queue.deferred"),
               cli_failures=sum(r.returncode != 0 for r in runs), redis_away_s=away,
               every_episode_leased_after_redis_back_s=watch.s(), episodes_doubled=0)
    finally:
        m.stop()


def test_postgres_away_is_a_typed_503_with_retry_after_never_a_500(
        own_postgres: EmbeddedPostgres, fresh_redis_url: str, tmp_path: Path) -> None:
    m = _master(tmp_path, own_postgres.url, fresh_redis_url)
    try:
        admin = _admin(m)
        worker = httpx.Client(base_url=m.url, timeout=60,
                              headers={"authorization": f"Bearer {m.worker_token}"})
        wid = worker.post("/v1/workers", json={"name": "w", "slots": 1}).json()["id"]
        created = admin.post("/v1/batches", json={"tasks": [json.loads(
            (EXAMPLES / "VM" / "KAlgebra" / "C-01.json").read_text())]})
        assert created.status_code == 201
        own_postgres.stop()
        calls = [admin.get("/v1/batches"), admin.get("/v1/status"),
                 worker.post("/v1/jobs/lease", json={"worker_id": wid}),
                 worker.post(f"/v1/workers/{wid}/heartbeat", json={})]
        for r in calls:
            assert r.status_code == 503, (r.request.url, r.status_code, r.text)
            assert r.headers["retry-after"] == "1"
            assert r.json()["detail"].startswith("postgres is unavailable ("), r.text
        assert "request.unhandled_error" not in (m.log_path.read_text() if m.log_path else "")
        watch = Stopwatch()
        own_postgres.start()
        started = watch.s()
        assert wait_for(lambda: admin.get("/v1/batches").status_code == 200,
                        "answers again", 60)
        record("postgres_stopped", answers_503=len(calls), answers_500=0,
               postgres_start_s=started, answers_again_after_start_s=watch.s() - started)
        [job] = wait_for(lambda: worker.post("/v1/jobs/lease", json={"worker_id": wid})
                         .json()["jobs"], "the episode leased", 60)
        assert job["attempt"] == 1
    finally:
        m.stop()


def test_a_name_that_does_not_resolve_is_a_503() -> None:
    app = FastAPI()
    unavailable.install(app, 2)

    @app.get("/x")
    async def x() -> None:
        raise socket.gaierror(-2, "Name or service not known")

    r = TestClient(app).get("/x")
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    assert r.json()["detail"].startswith("a dependency is unavailable (gaierror: ")


# what a pool's queries raised while PostgreSQL restarted under load (pg_ctl stop -m fast, then
# start; tests/master/test_postgres_restart.py), each as raised inside asyncpg
RESTART_ERRORS = [
    asyncpg.exceptions.InternalClientError(
        "cannot switch to state 12; another operation (2) is in progress"),
    asyncpg.exceptions.ConnectionDoesNotExistError(
        "connection was closed in the middle of operation: terminating connection due to "
        "administrator command"),
    asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
    asyncpg.exceptions.CannotConnectNowError("the database system is shutting down"),
    asyncpg.exceptions.InterfaceError("cannot perform operation: connection is closed"),
    ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 5432)"),
    ConnectionResetError(104, "Connection reset by peer"),
    ConnectionError("unexpected connection_lost() call"),
    TimeoutError(),
]


@pytest.mark.parametrize("error", RESTART_ERRORS, ids=lambda e: type(e).__name__)
def test_each_error_of_a_postgres_restart_is_a_503_naming_postgres(error: Exception) -> None:
    app = FastAPI()
    unavailable.install(app, 1)
    inside: dict[str, Any] = {"__name__": "asyncpg.connection", "error": error}
    exec("def query():\n    raise error", inside)

    @app.get("/q")
    async def q() -> None:
        inside["query"]()

    r = TestClient(app, raise_server_exceptions=False).get("/q")
    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
    assert r.json()["detail"].startswith(f"postgres is unavailable ({type(error).__name__}: ")


def test_a_closed_transport_under_a_store_is_a_503_and_any_other_runtime_error_a_500() -> None:
    app = FastAPI()
    unavailable.install(app, 1)
    store: dict[str, Any] = {"__name__": "asyncpg.protocol"}  # as raised inside asyncpg
    exec("def write():\n    raise RuntimeError('unable to perform operation on "
         "<TCPTransport closed=True>; the handler is closed')", store)

    @app.get("/closed")
    async def closed() -> None:
        store["write"]()

    @app.get("/bug")
    async def bug() -> None:
        raise RuntimeError("a bug of the master's own")

    client = TestClient(app, raise_server_exceptions=False)
    r = client.get("/closed")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["detail"].startswith("postgres is unavailable (RuntimeError: unable to ")
    assert client.get("/bug").status_code == 500

