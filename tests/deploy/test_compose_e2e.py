"""`docker compose up` for real: the root compose file (PostgreSQL and Redis from Debian's
packages, the master, the planner / executor / judge services on the recorded outputs of
examples/replays, the trainer on the tiny Qwen2.5-VL, profile ``train``) and a VM server
(deploy/compose/vm-server.yml: a worker whose slots are desktop containers of the ``docker``
provider, image coda-desktop) come up with the engine of this machine under unique project
names. Over the composed master's REST API a batch of TeXstudio C-02 x 2 rollouts is rolled
out by the composed worker in desktop containers, judged, grouped, and the trainer publishes a
planner version. Then ``down -v`` of both projects leaves nothing of them behind: no container,
network or volume of the projects and no desktop container of the worker.

Needs the engine (scripts/docker-engine.sh start) and builds the missing images
(scripts/docker-build.sh; CODA_E2E_REBUILD=1 rebuilds them all, e.g. after a code change), at
the tag ``CODA_IMAGE_TAG`` (``latest`` when unset) that the projects then run.
Fails, not skips, under CI=true when the engine is missing.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from coda.logging import get_logger
from coda.procs import free_port
from tests.fixtures.waiting import wait_for
from worker.providers.docker_base import project_image

log = get_logger("tests.compose_e2e")
REPORT = os.environ.get("CODA_COMPOSE_E2E_REPORT")
"""A JSON file for the run's figures (episodes, desktop containers, version, durations)."""

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "docker-compose.yml"
VM_SERVER = ROOT / "deploy" / "compose" / "vm-server.yml"
C02 = json.loads((ROOT / "examples" / "scienceboard" / "VM" / "TeXstudio" / "C-02.json")
                 .read_text())
IMAGES = ("postgres", "redis", "master", "models", "worker", "desktop")
ROLLOUTS = 2


def images(*names: str) -> dict[str, str]:
    """The compose files' image variables (``CODA_<NAME>_IMAGE``) for the project's images at
    the tag in use (``CODA_IMAGE_TAG``: a checkout sharing the engine runs its own)."""
    return {f"CODA_{name.upper()}_IMAGE": project_image(name) for name in names}


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: docker tests must run; scripts/test.sh starts the "
                    "engine)")
    pytest.skip(reason)


def compose_command() -> list[str]:
    """docker-compose 1.29 (Debian's; Compose v2 is not packaged there) or `docker compose`."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    proc = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if proc.returncode == 0:
        return ["docker", "compose"]
    _missing("neither docker-compose nor `docker compose` is installed")
    raise AssertionError("unreachable")


def docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


@pytest.fixture(scope="module")
def engine() -> list[str]:
    if shutil.which("docker") is None:
        _missing("no docker client (bash scripts/docker-engine.sh start)")
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        _missing("no Docker engine answers (bash scripts/docker-engine.sh start)")
    rebuild = bool(os.environ.get("CODA_E2E_REBUILD"))
    missing = [name for name in IMAGES
               if rebuild or subprocess.run(["docker", "image", "inspect", project_image(name)],
                                            capture_output=True, check=False).returncode != 0]
    if missing:
        subprocess.run(["bash", str(ROOT / "scripts" / "docker-build.sh"), *missing],
                       cwd=ROOT, check=True)
    return compose_command()


@dataclass
class Project:
    """One compose project: its name, files, environment file and environment."""

    name: str
    files: list[Path]
    env_file: Path
    env: dict[str, str]
    compose: list[str]
    profiles: list[str] = field(default_factory=list)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [*self.compose, "--env-file", str(self.env_file), "-p", self.name]
        for f in self.files:
            cmd += ["-f", str(f)]
        for p in self.profiles:
            cmd += ["--profile", p]
        proc = subprocess.run([*cmd, *args], cwd=ROOT, env=self.env, capture_output=True,
                              text=True, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd + list(args))} failed:\n{proc.stdout}\n"
                                 f"{proc.stderr}")
        return proc

    def logs(self) -> str:
        proc = self.run("logs", "--no-color", "--tail", "60", check=False)
        return proc.stdout[-12_000:] + proc.stderr[-2_000:]

    def containers(self) -> list[str]:
        return docker("ps", "-aq", "--filter",
                      f"label=com.docker.compose.project={self.name}").split()

    def networks(self) -> list[str]:
        return docker("network", "ls", "-q", "--filter",
                      f"label=com.docker.compose.project={self.name}").split()

    def volumes(self) -> list[str]:
        return docker("volume", "ls", "-q", "--filter",
                      f"label=com.docker.compose.project={self.name}").split()


def write_env(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def host_env() -> dict[str, str]:
    """This process's environment without the project's settings (a project sees its own)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("CODA_", "COMPOSE_", "POSTGRES_"))}


def server_project(name: str, values: dict[str, str], env_path: Path,
                   engine: list[str]) -> Project:
    """The server stack (``docker-compose.yml``, profile ``train``) with ``values`` in its
    environment file, which the master reads too (``CODA_ENV_FILE``)."""
    env_file = write_env(env_path, values)
    return Project(name, [STACK], env_file,
                   {**host_env(), **values, "CODA_ENV_FILE": str(env_file)}, engine,
                   profiles=["train"])


def vm_project(name: str, values: dict[str, str], env_path: Path,
               engine: list[str]) -> Project:
    """A VM server (``deploy/compose/vm-server.yml``) with ``values``."""
    return Project(name, [VM_SERVER], write_env(env_path, values), {**host_env(), **values},
                   engine)


@dataclass
class Stack:
    server: Project
    vm: Project
    master_url: str
    admin_token: str
    desktop_prefix: str


@pytest.fixture
def stack(engine: list[str], tmp_path: Path) -> Iterator[Stack]:
    name = f"codae2e{secrets.token_hex(3)}"
    tok = {k: secrets.token_urlsafe(24) for k in ("pg", "admin", "worker", "infer", "madmin")}
    ports = {k: free_port() for k in ("master", "planner", "executor", "judge")}
    server_values = {
        "POSTGRES_PASSWORD": tok["pg"], "CODA_ADMIN_TOKEN": tok["admin"],
        "CODA_WORKER_TOKENS": tok["worker"], "CODA_MODEL_INFERENCE_TOKENS": tok["infer"],
        "CODA_MODEL_ADMIN_TOKEN": tok["madmin"],
        **images("postgres", "redis", "master", "models"),
        "CODA_PUBLISH_ADDRESS": "127.0.0.1", "CODA_MASTER_PORT": str(ports["master"]),
        "CODA_PLANNER_PUBLISH": str(ports["planner"]),
        "CODA_EXECUTOR_PUBLISH": str(ports["executor"]),
        "CODA_JUDGE_PUBLISH": str(ports["judge"]),
    }
    server = server_project(name, server_values, tmp_path / "server.env", engine)
    desktop_prefix = f"{name}-desktop"
    loopback = "http://127.0.0.1"
    vm_values = {
        "CODA_MASTER_URL": f"{loopback}:{ports['master']}", "CODA_WORKER_TOKEN": tok["worker"],
        "CODA_WORKER_NAME": f"{name}-worker", "CODA_WORKER_SLOTS": str(ROLLOUTS),
        "CODA_WORKER_JOB_SLOTS": "1", "CODA_WORKER_PROVIDER": "docker",
        "CODA_WORKER_PROVIDER_OPTIONS": json.dumps(
            {"image": project_image("desktop"), "name_prefix": desktop_prefix}),
        "CODA_WORKER_PLANNER_URL": f"{loopback}:{ports['planner']}",
        "CODA_WORKER_EXECUTOR_URL": f"{loopback}:{ports['executor']}",
        "CODA_WORKER_JUDGE_URL": f"{loopback}:{ports['judge']}",
        "CODA_WORKER_MODEL_TOKEN": tok["infer"], "CODA_WORKER_DRAIN_GRACE_S": "20",
        **images("worker"),
        "CODA_VM_DIR": str(tmp_path / "vms"),
    }
    (tmp_path / "vms").mkdir()
    vm = vm_project(f"{name}vm", vm_values, tmp_path / "vm.env", engine)
    ok = False
    try:
        server.run("up", "-d", "--no-build")
        master_url = f"{loopback}:{ports['master']}"
        wait(lambda: httpx.get(f"{master_url}/readyz", timeout=5).status_code == 200,
             "the composed master's /readyz", 300, server)
        vm.run("up", "-d", "--no-build")
        yield Stack(server, vm, master_url, tok["admin"], desktop_prefix)
        ok = True
    finally:
        if not ok:
            log.warning("compose_e2e.failed", vm_logs=vm.logs(), server_logs=server.logs())
        vm.run("down", "-v", "--remove-orphans", "--timeout", "90", check=False)
        server.run("down", "-v", "--remove-orphans", "--timeout", "30", check=False)
        stragglers = desktop_containers(desktop_prefix)
        if stragglers:  # the test asserts none were left; clean them anyway
            docker("rm", "-f", *stragglers, check=False)


def desktop_containers(prefix: str) -> list[str]:
    """The names of the worker's desktop containers (by the name prefix this test gave it)."""
    return [name for name in docker("ps", "-a", "--format", "{{.Names}}").split()
            if name.startswith(prefix)]


_UNITS = {"B": 1 / 2**20, "KiB": 1 / 2**10, "kB": 1 / 2**10, "MiB": 1.0, "MB": 1.0,
          "GiB": 2**10, "GB": 2**10}


def desktop_memory(names: list[str]) -> dict[str, float]:
    """MiB used by each running container (`docker stats`), those that answer."""
    out = docker("stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}", *names,
                 check=False)
    usage = {}
    for line in out.splitlines():
        name, used = line.split()[0], line.split()[1]
        unit = used.lstrip("0123456789.")
        if unit in _UNITS and used[: -len(unit)]:
            usage[name] = float(used[: -len(unit)]) * _UNITS[unit]
    return usage


def wait(probe: Callable[[], Any], what: str, timeout: float, *projects: Project,
         on_poll: Callable[[], None] | None = None) -> Any:
    """Poll a state until it holds; the deadline only bounds a hang (then logs are shown)."""
    return wait_for(probe, what, timeout, interval=1.0, on_poll=on_poll,
                    logs=lambda: "\n".join(f"--- {p.name}\n{p.logs()}" for p in projects))


def settled(status: dict[str, Any]) -> dict[str, Any] | None:
    """The status once no job is queued or leased and no group waits for the trainer."""
    busy = sum(q["queued"] + q["leased"] for q in status["queues"])
    waiting = status["groups"].get("ready", 0) + status["groups"].get("leased", 0)
    done = busy == 0 and waiting == 0 and status["groups"].get("consumed", 0) >= 1
    return status if done else None


def test_compose_stack_and_vm_server_run_the_loop(stack: Stack) -> None:
    started = time.monotonic()
    server, vm = stack.server, stack.vm
    http = httpx.Client(base_url=stack.master_url, timeout=60,
                        headers={"authorization": f"Bearer {stack.admin_token}"})
    seen: set[str] = set()
    peak_mib: dict[str, float] = {}

    def watch_desktops() -> None:
        names = desktop_containers(stack.desktop_prefix)
        seen.update(names)
        if names:  # memory of each desktop container while episodes run (a reported figure)
            for name, mib in desktop_memory(names).items():
                peak_mib[name] = max(mib, peak_mib.get(name, 0.0))

    created = http.post("/v1/batches", json={"name": "compose-e2e", "tasks": [C02],
                                             "rollouts": ROLLOUTS})
    assert created.status_code == 201, created.text
    batch = created.json()["batch"]["id"]
    wait(lambda: http.get(f"/v1/batches/{batch}").json()["status"] == "finished",
         "the batch rolled out by the composed worker", 1200, vm, server,
         on_poll=watch_desktops)
    progress = http.get(f"/v1/batches/{batch}").json()["progress"]
    assert progress["completed"] == ROLLOUTS and progress["succeeded"] == ROLLOUTS, progress
    assert seen, "no desktop container of the worker was seen while the batch ran"

    status = wait(lambda: settled(http.get("/v1/status").json()),
                  "the judge and group jobs done and their groups trained", 900, vm, server)
    version = wait(lambda: http.get("/v1/models/current", params={"role": "planner"}).json()
                   .get("name"), "a planner version published by the trainer", 600, vm, server)
    assert status["verdicts"]["judged"] == ROLLOUTS, status["verdicts"]
    assert status["groups"].get("consumed", 0) >= 1, status["groups"]
    episodes = http.get("/v1/episodes", params={"batch_id": batch}).json()["items"]
    assert all(e["status"] == "completed" and e["success"] for e in episodes), episodes
    names = {w["name"] for w in http.get("/v1/workers").json()}
    assert f"{vm.name.removesuffix('vm')}-worker" in names, names
    figures = {"episodes": [{k: e[k] for k in ("id", "status", "success")} for e in episodes],
               "desktop_containers": sorted(seen), "planner_version": version,
               "desktop_peak_mib": {k: round(v) for k, v in sorted(peak_mib.items())},
               "workers": sorted(names), "submit_to_version_s": round(time.monotonic() - started)}
    log.info("compose_e2e.loop_done", **figures)
    if REPORT:
        Path(REPORT).write_text(json.dumps(figures, indent=2))

    # stop: the worker drains and removes its desktop containers itself
    vm.run("down", "-v", "--remove-orphans", "--timeout", "90")
    assert desktop_containers(stack.desktop_prefix) == [], "desktop containers left running"
    server.run("down", "-v", "--remove-orphans", "--timeout", "30")
    for project in (vm, server):
        assert project.containers() == [], f"{project.name}: containers left"
        assert project.networks() == [], f"{project.name}: networks left"
        assert project.volumes() == [], f"{project.name}: volumes left"
