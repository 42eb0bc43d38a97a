"""The PostgreSQL and Redis images built from Debian's packages (deploy/docker/Dockerfile.postgres,
Dockerfile.redis), run with the engine of this machine: the first start creates the user,
password and database of POSTGRES_*, password authentication over TCP refuses a wrong
password, the data survives a restart on its volume, the healthchecks turn healthy; Redis runs
with protected mode off and answers. Containers run with ``--network none`` (their own
loopback only) and are removed with their volumes. Fails, not skips, under CI=true when the
engine is missing (scripts/test.sh starts it).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.waiting import wait_for
from worker.providers.docker_base import project_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: docker tests must run)")
    pytest.skip(reason)


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def images() -> None:
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        _missing("no Docker engine answers (bash scripts/docker-engine.sh start)")
    missing = [name for name in ("postgres", "redis")
               if docker("image", "inspect", project_image(name), check=False).returncode]
    if missing:
        subprocess.run(["bash", str(ROOT / "scripts" / "docker-build.sh"), *missing],
                       cwd=ROOT, check=True)


@pytest.fixture
def names() -> Iterator[list[str]]:
    """Containers and volumes a test creates (by name), removed afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        docker("rm", "-f", "-v", name, check=False)
        docker("volume", "rm", "-f", name, check=False)


def wait_healthy(name: str, timeout: float = 120) -> None:
    """Until the image's healthcheck says healthy (the deadline only bounds a hang)."""
    def state() -> list[str]:
        return docker("inspect", "--format", "{{.State.Health.Status}} {{.State.Status}}",
                      name).stdout.split()

    wait_for(lambda: state()[0] == "healthy", f"{name} healthy", timeout, interval=0.5,
             logs=lambda: docker("logs", name, check=False).stderr,
             gone=lambda: f"{name} exited" if state()[1] == "exited" else None)


def test_postgres_image_initialises_authenticates_and_keeps_its_data(
        images: None, names: list[str]) -> None:
    name = f"coda-pgtest-{secrets.token_hex(3)}"
    password = secrets.token_urlsafe(16)
    names.append(name)
    docker("run", "-d", "--name", name, "--network", "none", "-v",
           f"{name}:/var/lib/postgresql/data", "-e", "POSTGRES_USER=coda", "-e",
           "POSTGRES_DB=codadb", "-e", f"POSTGRES_PASSWORD={password}", project_image("postgres"))
    wait_healthy(name)

    def psql(sql: str, pw: str = password) -> subprocess.CompletedProcess[str]:
        return docker("exec", "-e", f"PGPASSWORD={pw}", name, "psql", "-h", "127.0.0.1", "-U",
                      "coda", "-d", "codadb", "-tAc", sql, check=False)

    assert psql("select current_user, current_database()").stdout.strip() == "coda|codadb"
    refused = psql("select 1", pw="wrong-password")
    assert refused.returncode != 0 and "password authentication failed" in refused.stderr
    assert psql("create table kept (v text); insert into kept values ('yes')").returncode == 0
    docker("restart", name)
    wait_healthy(name)
    assert psql("select v from kept").stdout.strip() == "yes"
    # initialised once: the restart found the cluster on its volume
    assert docker("logs", name).stderr.count("coda-postgres: initialised") == 1


def test_postgres_image_refuses_to_start_without_a_password(images: None,
                                                            names: list[str]) -> None:
    name = f"coda-pgtest-{secrets.token_hex(3)}"
    names.append(name)
    proc = docker("run", "--name", name, "--network", "none", "-v",
                  f"{name}:/var/lib/postgresql/data", project_image("postgres"), check=False)
    assert proc.returncode != 0 and "set POSTGRES_PASSWORD" in proc.stderr


def test_redis_image_answers_without_protected_mode(images: None, names: list[str]) -> None:
    name = f"coda-redistest-{secrets.token_hex(3)}"
    names.append(name)
    docker("run", "-d", "--name", name, "--network", "none", "-v", f"{name}:/data",
           project_image("redis"), "redis-server", "--appendonly", "yes")
    wait_healthy(name)
    out = docker("exec", name, "redis-cli", "CONFIG", "GET", "protected-mode").stdout.split()
    assert out == ["protected-mode", "no"]
    assert docker("exec", name, "redis-cli", "CONFIG", "GET", "appendonly").stdout.split() == [
        "appendonly", "yes"]
