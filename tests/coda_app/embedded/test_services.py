"""Embedded Postgres + Redis (always the embedded ones here, whatever DATABASE_URL says)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from coda_app.embedded import (
    EmbeddedServiceError,
    EmbeddedServices,
    embedded_services,
    port_is_free,
)
from coda_app.embedded.common import package_dir
from tests.coda_app.embedded.stores import pg, redis_client, url_port

REPO_ROOT = Path(__file__).resolve().parents[3]


def test_data_survives_clean_restart(data_dir: Path) -> None:
    with EmbeddedServices() as first:
        db_url = first.start_postgres(data_dir)
        redis_url = first.start_redis(data_dir)
        assert db_url.startswith("postgresql+asyncpg://postgres@127.0.0.1:")
        assert db_url.endswith("/coda")
        assert redis_url.startswith("redis://127.0.0.1:") and redis_url.endswith("/0")
        pg(db_url, "CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('row-1')")
        with redis_client(redis_url) as r:
            r.set("kept", "key-1")
    assert port_is_free(url_port(db_url)) and port_is_free(url_port(redis_url))

    with EmbeddedServices() as second:
        db_url2 = second.start_postgres(data_dir)
        redis_url2 = second.start_redis(data_dir)
        assert pg(db_url2, "SELECT v FROM kept") == [["row-1"]]
        with redis_client(redis_url2) as r:
            assert r.get("kept") == "key-1"
    assert port_is_free(url_port(db_url2)) and port_is_free(url_port(redis_url2))


_ORPHAN = """
import json, os, sys
from coda_app.embedded import EmbeddedServices
from coda.logging import configure_logging
configure_logging("WARNING")
s = EmbeddedServices()
urls = [s.start_postgres(sys.argv[1]), s.start_redis(sys.argv[1])]
print(json.dumps(urls), flush=True)
os._exit(0)  # dies without stopping anything
"""


@pytest.mark.slow
def test_start_after_parent_died_stops_leftovers(
    data_dir: Path, services: EmbeddedServices
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _ORPHAN, str(data_dir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    old_db, old_redis = json.loads(out.stdout)
    pg(old_db, "CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('row-1')")
    with redis_client(old_redis) as r:
        r.set("kept", "key-1")

    db_url = services.start_postgres(data_dir)
    redis_url = services.start_redis(data_dir)
    assert port_is_free(url_port(old_db)) and port_is_free(url_port(old_redis))
    assert pg(db_url, "SELECT v FROM kept") == [["row-1"]]
    with redis_client(redis_url) as r:
        assert r.get("kept") == "key-1"


# fast: no fsync. With fsync, the shutdown checkpoint (and Redis' final save) wait on the disk,
# which took past the test's bound once on a machine busy writing (a fresh clone installing).
_SERVE = """
import json, signal, sys, time
from coda_app.embedded import embedded_services, exit_on_sigterm
from coda.logging import configure_logging
configure_logging("WARNING")
signal.signal(signal.SIGINT, signal.SIG_IGN)  # as inherited by a job started with `&`
exit_on_sigterm()
with embedded_services(sys.argv[1], environ={}, fast=True) as urls:
    print(json.dumps([urls.database_url, urls.redis_url]), flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_to_parent_stops_servers(data_dir: Path, sig: signal.Signals,
                                        tmp_path: Path) -> None:
    errors = tmp_path / "stderr"
    with errors.open("w") as err:  # a file, not a pipe nobody reads: the child never blocks
        proc = subprocess.Popen([sys.executable, "-c", _SERVE, str(data_dir)], cwd=REPO_ROOT,
                                stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, errors.read_text()
        db_url, redis_url = json.loads(line)
        assert pg(db_url, "SELECT 1") == [[1]]
        proc.send_signal(sig)
        proc.wait(120)  # an upper bound only: a stop takes about a second
    finally:
        proc.kill()
    assert port_is_free(url_port(db_url)) and port_is_free(url_port(redis_url))
    assert not (data_dir / "postgres" / "postmaster.pid").exists()
    assert not (data_dir / "redis" / "redis.pid").exists()


@pytest.mark.slow
def test_stale_pid_files_after_kill_do_not_block_start(data_dir: Path) -> None:
    crashed = EmbeddedServices()
    db_url = crashed.start_postgres(data_dir)
    crashed.start_redis(data_dir)
    pg(db_url, "CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('row-1')")
    for pidfile in (data_dir / "postgres" / "postmaster.pid", data_dir / "redis" / "redis.pid"):
        os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
    crashed._servers.clear()  # as if this process had died too

    with EmbeddedServices() as restarted:
        db_url2 = restarted.start_postgres(data_dir)
        redis_url2 = restarted.start_redis(data_dir)
        assert pg(db_url2, "SELECT v FROM kept") == [["row-1"]]
        with redis_client(redis_url2) as r:
            assert r.ping()



def test_busy_port_is_a_clear_error(data_dir: Path, services: EmbeddedServices) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(EmbeddedServiceError, match=f"port {port} .* already in use"):
            services.start_redis(data_dir, port=port)
        with pytest.raises(EmbeddedServiceError, match=f"port {port} .* already in use"):
            services.start_postgres(data_dir, port=port)


def test_environment_urls_replace_embedded_servers(data_dir: Path) -> None:
    env = {
        "DATABASE_URL": "postgresql://u:secret@db.example:5432/x",
        "REDIS_URL": "redis://r:6379/2",
    }
    with embedded_services(data_dir, environ=env) as urls:
        assert urls.database_url == "postgresql+asyncpg://u:secret@db.example:5432/x"
        assert urls.redis_url == "redis://r:6379/2"
    assert not (data_dir / "postgres").exists() and not (data_dir / "redis").exists()


def test_embedded_services_without_environment(data_dir: Path) -> None:
    with embedded_services(data_dir, environ={}) as urls:
        assert pg(urls.database_url, "SELECT current_database()") == [["coda"]]
        with redis_client(urls.redis_url) as r:
            assert r.ping()
    assert port_is_free(url_port(urls.database_url)) and port_is_free(url_port(urls.redis_url))


# ---- the shared fixtures (tests/fixtures/infra.py), against whichever servers the session has


def test_fresh_database_is_empty_and_writable(fresh_database_url: str) -> None:
    assert fresh_database_url.startswith("postgresql+asyncpg://")
    tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
    assert pg(fresh_database_url, tables) == [[0]]
    pg(fresh_database_url, "CREATE TABLE t (v int)", "INSERT INTO t VALUES (1)")


def test_fresh_database_exists_on_the_server(
    fresh_database_url: str, postgres_server_url: str
) -> None:
    name = fresh_database_url.rsplit("/", 1)[1]
    assert name.startswith("coda_test_")
    assert pg(
        postgres_server_url, f"SELECT count(*) FROM pg_database WHERE datname = '{name}'"
    ) == [[1]]


def test_fresh_redis_db_is_empty_and_not_db0(fresh_redis_url: str) -> None:
    assert not fresh_redis_url.endswith("/0")
    with redis_client(fresh_redis_url) as r:
        assert r.dbsize() == 0
        r.set("k", "v")
        r.flushdb()  # what a data-loss test does
        assert r.dbsize() == 0


def test_missing_package_is_a_clear_error() -> None:
    with pytest.raises(EmbeddedServiceError, match="set REDIS_URL"):
        package_dir("no_such_package_for_coda", "install it, or set REDIS_URL")
