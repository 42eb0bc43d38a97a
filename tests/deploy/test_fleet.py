"""A fleet on one machine (issue 25, points 1-3): the server stack of docker-compose.yml and
three VM servers (three projects of deploy/compose/vm-server.yml, each with its own worker
token, worker name and desktop containers) on the real engine, one stack shared by the
scenarios in order:

1. a batch spreads over the three VM servers (each rolls out at least one episode of TeXstudio
   C-02 on the replay models), the episodes are judged and grouped, the trainer publishes a
   planner version;
2. failover: one VM server's worker is killed (``docker kill``) mid-episode; its lease expires
   (the stack runs with a 10 s lease TTL) and the others roll its episode out: no episode lost,
   none counted twice, one judge job per episode; ``up -d`` brings the server back, its stale
   desktop containers are removed and it takes work again;
3. rolling upgrade: a VM server is drained (``stop``: SIGTERM, running episodes finish within
   the drain grace, 2 s on that server, or go back to the queue), brought up on a new worker
   image tag and rejoins; nothing is lost and the master's status (and dashboard) show it gone
   and back online, and it takes work again.

Then ``down -v`` of the four projects leaves nothing with the test's prefix. The figures
(time to re-lease after the kill, drain time, episodes re-queued, lost, doubled) go to
CODA_FLEET_REPORT when set (``python -m benchmarks.fleet`` runs this module and writes
benchmarks/results/fleet.json from them).

Needs the engine (scripts/docker-engine.sh start) and the images of scripts/docker-build.sh,
as tests/deploy/test_compose_e2e.py does (its helpers are shared).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from coda.logging import get_logger
from coda.procs import free_port
from tests.deploy.test_compose_e2e import (
    C02,
    Project,
    docker,
    engine,  # noqa: F401 - the module fixture this module shares
    images,
    server_project,
    vm_project,
    wait,
    write_env,
)
from worker.providers.docker_base import project_image

log = get_logger("tests.fleet")
REPORT = os.environ.get("CODA_FLEET_REPORT")
"""A JSON file for the run's figures (failover and rolling upgrade)."""

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SERVERS = 3
ROLLOUTS = 3  # a batch: C-02 x 3, one episode per VM server when all are idle
LONG = 6  # a batch long enough to catch an episode of one given VM server running
LEASE_TTL_S = 10
HEARTBEAT_S = 2
DRAIN_GRACE_S = 20
UPGRADE_GRACE_S = 2  # the upgraded server's: its running episode goes back to the queue
UPGRADE_TAG = "coda-worker:upgrade"
HANG_S = 1200  # bounds a hang only: every wait is on state
FIGURES: dict[str, Any] = {}


@dataclass
class VmServer:
    project: Project
    worker: str  # CODA_WORKER_NAME
    desktop_prefix: str
    values: dict[str, str]

    def worker_container(self) -> str:
        return self.project.run("ps", "-q", "worker").stdout.strip()

    def desktops(self) -> list[str]:
        """Ids of this server's desktop containers (running or not)."""
        return docker("ps", "-aq", "--filter",
                      f"label=coda.desktop.prefix={self.desktop_prefix}").split()

    def set_env(self, **values: str) -> None:
        self.values.update(values)
        write_env(self.project.env_file, self.values)
        self.project.env.update(values)


@dataclass
class Fleet:
    prefix: str
    server: Project
    vms: list[VmServer]
    master_url: str
    http: httpx.Client
    batches: dict[str, int] = field(default_factory=dict)  # id: rollouts

    @property
    def projects(self) -> list[Project]:
        return [*(v.project for v in self.vms), self.server]

    def status(self) -> dict[str, Any]:
        r = self.http.get("/v1/status")
        r.raise_for_status()
        return dict(r.json())

    def psql(self, sql: str) -> list[list[str]]:
        """Rows of a query on the master's PostgreSQL (the source of truth)."""
        out = self.server.run("exec", "-T", "postgres", "psql", "-U", "coda", "-d", "coda",
                              "-At", "-F", "|", "-c", sql).stdout
        return [line.split("|") for line in out.splitlines() if line]

    def submit(self, name: str, rollouts: int = ROLLOUTS) -> str:
        created = self.http.post("/v1/batches", json={"name": name, "tasks": [C02],
                                                      "rollouts": rollouts})
        assert created.status_code == 201, created.text
        batch = str(created.json()["batch"]["id"])
        self.batches[batch] = rollouts
        return batch

    def wait_finished(self, batch: str, what: str) -> dict[str, Any]:
        wait(lambda: self.http.get(f"/v1/batches/{batch}").json()["status"] == "finished",
             what, HANG_S, *self.projects)
        return dict(self.http.get(f"/v1/batches/{batch}").json()["progress"])

    def online(self, name: str) -> list[dict[str, Any]]:
        """The status's rows of a worker name that are online."""
        return [w for w in self.status()["workers"] if w["name"] == name and w["online"]]

    def rolled_out_by(self, batch: str) -> dict[str, int]:
        """Succeeded episode jobs of a batch per worker name (jobs keep their last worker)."""
        rows = self.psql("select w.name, count(*) from jobs j join workers w "
                         "on w.id = j.worker_id where j.kind = 'episode' and j.status = "
                         f"'succeeded' and j.batch_id = '{batch}' group by w.name")
        return {name: int(n) for name, n in rows}

    def exactly_once(self, batch: str) -> dict[str, Any]:
        """Assert a batch lost nothing and counted nothing twice; its episodes' attempts."""
        n = self.batches[batch]
        progress = self.http.get(f"/v1/batches/{batch}").json()["progress"]
        assert progress["total"] == n, progress
        assert progress["completed"] == n and progress["failed"] == 0, progress
        episodes = self.http.get("/v1/episodes", params={"batch_id": batch}).json()["items"]
        assert len(episodes) == n, episodes
        assert sorted(e["rollout"] for e in episodes) == list(range(n)), episodes
        assert all(e["status"] == "completed" for e in episodes), episodes
        jobs = self.psql("select status, count(*) from jobs where kind = 'episode' and "
                         f"batch_id = '{batch}' group by status")
        assert jobs == [["succeeded", str(n)]], jobs
        # the judge jobs of the batch's episodes, once the follow-ups ran
        wait(lambda: settled(self.status()), "the judge and group jobs done", HANG_S,
             *self.projects)
        judged = dict(self.psql(
            "select e.id, count(j.id) from episodes e left join jobs j on j.kind = 'judge' "
            f"and j.payload ->> 'episode_id' = e.id::text where e.batch_id = '{batch}' "
            "group by e.id"))
        assert sorted(judged) == sorted(e["id"] for e in episodes), judged
        assert set(judged.values()) == {"1"}, f"judge jobs per episode: {judged}"
        verdicts = self.psql("select count(*) from episodes where verdict is not null and "
                             f"batch_id = '{batch}'")
        assert verdicts == [[str(n)]], verdicts  # one verdict per episode: none doubled
        return {e["id"]: e["attempts"] for e in episodes}


def settled(status: dict[str, Any]) -> dict[str, Any] | None:
    """The status once no job is queued or leased (groups may still wait for the trainer)."""
    busy = sum(q["queued"] + q["leased"] for q in status["queues"])
    return status if busy == 0 else None


def running_on(fleet: Fleet, worker: str, batch: str) -> dict[str, Any] | None:
    """A live slot (running episode) of this worker, if any; fails once the batch has no
    episode left that it could still run."""
    status = fleet.status()
    slot = next((s for s in status["live"] if s["worker"] == worker), None)
    if slot is None:
        progress = fleet.http.get(f"/v1/batches/{batch}").json()["progress"]
        assert progress["queued"] > 0 or progress["running"] > 0, \
            f"{worker} ran no episode of the batch while it was watched: {progress}"
    return slot


def worker_log_events(vm: VmServer, event: str) -> list[dict[str, Any]]:
    """The worker's JSON log lines of one event (compose prefixes each line)."""
    out = vm.project.run("logs", "--no-color", "worker", check=False).stdout
    found = []
    for line in out.splitlines():
        start = line.find("{")
        if start < 0 or event not in line:
            continue
        try:
            doc = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        if doc.get("event") == event:
            found.append(doc)
    return found


def leftovers(prefix: str) -> dict[str, list[str]]:
    """Containers, networks and volumes whose name starts with the test's prefix."""
    return {
        "containers": [n for n in docker("ps", "-a", "--format", "{{.Names}}").split()
                       if n.startswith(prefix)],
        "networks": [n for n in docker("network", "ls", "--format", "{{.Name}}").split()
                     if n.startswith(prefix)],
        "volumes": [n for n in docker("volume", "ls", "--format", "{{.Name}}").split()
                    if n.startswith(prefix)],
    }


def down(fleet: Fleet) -> None:
    for vm in fleet.vms:
        vm.project.run("down", "-v", "--remove-orphans", "--timeout", "90", check=False)
    fleet.server.run("down", "-v", "--remove-orphans", "--timeout", "30", check=False)


@pytest.fixture(scope="module")
def fleet(engine: list[str], tmp_path_factory: pytest.TempPathFactory  # noqa: F811
          ) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("fleet")
    prefix = f"codafleet{secrets.token_hex(3)}"
    tok = {k: secrets.token_urlsafe(24)
           for k in ("pg", "admin", "infer", "madmin", *(f"w{i}" for i in range(SERVERS)))}
    ports = {k: free_port() for k in ("master", "planner", "executor", "judge")}
    server_values = {
        "POSTGRES_PASSWORD": tok["pg"], "CODA_ADMIN_TOKEN": tok["admin"],
        # one worker token per VM server
        "CODA_WORKER_TOKENS": ",".join(tok[f"w{i}"] for i in range(SERVERS)),
        "CODA_MODEL_INFERENCE_TOKENS": tok["infer"], "CODA_MODEL_ADMIN_TOKEN": tok["madmin"],
        **images("postgres", "redis", "models"),
        # another tag of the master built from this tree, on an engine shared with other work
        "CODA_MASTER_IMAGE": os.environ.get("CODA_FLEET_MASTER_IMAGE", project_image("master")),
        "CODA_PUBLISH_ADDRESS": "127.0.0.1", "CODA_MASTER_PORT": str(ports["master"]),
        "CODA_PLANNER_PUBLISH": str(ports["planner"]),
        "CODA_EXECUTOR_PUBLISH": str(ports["executor"]),
        "CODA_JUDGE_PUBLISH": str(ports["judge"]),
        # the master reads its optional settings from this file (env_file): a short lease TTL
        "CODA_LEASE_TTL_S": str(LEASE_TTL_S),
    }
    server = server_project(prefix, server_values, tmp / "server.env", engine)
    loopback = "http://127.0.0.1"
    master_url = f"{loopback}:{ports['master']}"
    vms = []
    for i in range(SERVERS):
        desktop_prefix = f"{prefix}-vm{i}-desktop"
        values = {
            "CODA_MASTER_URL": master_url, "CODA_WORKER_TOKEN": tok[f"w{i}"],
            "CODA_WORKER_NAME": f"{prefix}-vm{i}", "CODA_WORKER_SLOTS": "1",
            "CODA_WORKER_JOB_SLOTS": "1", "CODA_WORKER_PROVIDER": "docker",
            # desktops' liveness marks on the fleet's own time scale: a worker back after a
            # kill takes its desktops for stale once their mark is older than the TTL (the
            # default 120 s kept the comeback from taking work before the others had finished
            # the batch it was meant to share)
            "CODA_WORKER_PROVIDER_OPTIONS": json.dumps(
                {"image": project_image("desktop"), "name_prefix": desktop_prefix,
                 "alive_interval_s": HEARTBEAT_S, "alive_ttl_s": LEASE_TTL_S}),
            "CODA_WORKER_PLANNER_URL": f"{loopback}:{ports['planner']}",
            "CODA_WORKER_EXECUTOR_URL": f"{loopback}:{ports['executor']}",
            "CODA_WORKER_JUDGE_URL": f"{loopback}:{ports['judge']}",
            "CODA_WORKER_MODEL_TOKEN": tok["infer"],
            "CODA_WORKER_DRAIN_GRACE_S": str(UPGRADE_GRACE_S if i == 2 else DRAIN_GRACE_S),
            "CODA_WORKER_HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
            "CODA_VM_DIR": str(tmp / f"vms{i}"),
            **images("worker"),
        }
        (tmp / f"vms{i}").mkdir()
        project = vm_project(f"{prefix}vm{i}", values, tmp / f"vm{i}.env", engine)
        vms.append(VmServer(project, values["CODA_WORKER_NAME"], desktop_prefix, values))
    http = httpx.Client(base_url=master_url, timeout=60,
                        headers={"authorization": f"Bearer {tok['admin']}"})
    fleet = Fleet(prefix, server, vms, master_url, http)
    FIGURES["loadavg_before"] = [round(x, 2) for x in os.getloadavg()]
    try:
        server.run("up", "-d", "--no-build")
        wait(lambda: httpx.get(f"{master_url}/readyz", timeout=5).status_code == 200,
             "the composed master's /readyz", 300, server)
        for vm in vms:
            vm.project.run("up", "-d", "--no-build")
        wait(lambda: all(fleet.online(vm.worker) for vm in vms),
             "the three VM servers' workers online in /v1/status", 300, *fleet.projects)
        yield fleet
    finally:
        scenarios = [v for v in FIGURES.values() if isinstance(v, dict)]
        if not all(r.get("ok") for r in scenarios) or len(scenarios) < 3:
            for p in fleet.projects:
                log.warning("fleet.logs", project=p.name, logs=p.logs())
        down(fleet)
        stragglers = leftovers(prefix)["containers"]
        if stragglers:  # the last test asserts none were left; clean them anyway
            docker("rm", "-f", *stragglers, check=False)
        docker("rmi", UPGRADE_TAG, check=False)
        http.close()


def test_1_a_batch_spreads_over_three_vm_servers_and_trains(fleet: Fleet) -> None:
    started = time.monotonic()
    batch = fleet.submit("fleet-spread")
    progress = fleet.wait_finished(batch, "the batch rolled out by the three VM servers")
    assert progress["completed"] == ROLLOUTS, progress
    by_worker = fleet.rolled_out_by(batch)
    assert set(by_worker) == {vm.worker for vm in fleet.vms}, by_worker
    attempts = fleet.exactly_once(batch)
    version = wait(lambda: fleet.http.get("/v1/models/current", params={"role": "planner"})
                   .json().get("name"), "a planner version published by the trainer", 900,
                   *fleet.projects)
    status = fleet.status()
    assert status["groups"].get("consumed", 0) >= 1, status["groups"]
    FIGURES["spread"] = {"ok": True, "episodes_per_server": by_worker, "attempts": attempts,
                         "planner_version": version,
                         "submit_to_version_s": round(time.monotonic() - started, 1)}
    log.info("fleet.spread", **FIGURES["spread"])


def test_2_failover_a_killed_vm_server(fleet: Fleet) -> None:
    victim = fleet.vms[1]
    batch = fleet.submit("fleet-failover", LONG)
    slot = wait(lambda: running_on(fleet, victim.worker, batch),
                f"an episode running on {victim.worker}", HANG_S, *fleet.projects)
    episode = slot["episode_id"]
    container = victim.worker_container()
    docker("kill", container)
    killed = time.monotonic()
    stale = victim.desktops()
    assert stale, "the killed worker's desktop container should be left behind"

    def requeued() -> float | None:
        e = fleet.http.get(f"/v1/episodes/{episode}", params={"steps": "false"}).json()
        return time.monotonic() if e["status"] != "running" or e["attempts"] > \
            slot["attempt"] else None

    def re_leased() -> float | None:
        e = fleet.http.get(f"/v1/episodes/{episode}", params={"steps": "false"}).json()
        again = e["attempts"] > slot["attempt"] and e["status"] in ("running", "completed")
        return time.monotonic() if again else None

    requeued_at = wait(requeued, "the killed worker's lease expired", HANG_S, *fleet.projects)
    re_leased_at = wait(re_leased, "its episode leased by another VM server", HANG_S,
                        *fleet.projects)
    fleet.wait_finished(batch, "the batch finished by the two VM servers left")
    attempts = fleet.exactly_once(batch)
    assert attempts[episode] == slot["attempt"] + 1, attempts
    by_worker = fleet.rolled_out_by(batch)
    [[finisher]] = fleet.psql("select w.name from episodes e join jobs j on j.id = e.job_id "
                              f"join workers w on w.id = j.worker_id where e.id = '{episode}'")
    assert finisher != victim.worker, finisher
    lost = LONG - sum(by_worker.values())
    assert lost == 0, by_worker
    assert docker("inspect", "-f", "{{.State.Running}}", container).strip() == "false"
    assert set(stale) <= set(victim.desktops()), "nobody should have removed them yet"

    # the server comes back: its stale desktop containers go and it takes work again
    victim.project.run("up", "-d", "--no-build")
    wait(lambda: fleet.online(victim.worker), f"{victim.worker} online again", 300,
         *fleet.projects)
    again = fleet.submit("fleet-failover-back")
    wait(lambda: not set(stale) & set(victim.desktops()),
         "the stale desktop containers removed", HANG_S, *fleet.projects)
    fleet.wait_finished(again, "a batch after the comeback")
    fleet.exactly_once(again)
    assert victim.worker in fleet.rolled_out_by(again), fleet.rolled_out_by(again)
    FIGURES["failover"] = {
        "ok": True, "lease_ttl_s": LEASE_TTL_S, "heartbeat_s": HEARTBEAT_S,
        "requeued_after_kill_s": round(requeued_at - killed, 1),
        "re_leased_after_kill_s": round(re_leased_at - killed, 1),
        "episodes_lost": lost, "episodes_doubled": 0, "judge_jobs_per_episode": 1,
        "killed_episode_attempts": attempts[episode], "episodes_per_server": by_worker,
        "stale_desktops_removed": len(stale)}
    log.info("fleet.failover", **FIGURES["failover"])


def test_3_rolling_upgrade_of_a_vm_server(fleet: Fleet) -> None:
    target = fleet.vms[2]
    docker("tag", project_image("worker"), UPGRADE_TAG)
    before = fleet.online(target.worker)
    assert len(before) == 1, before
    batch = fleet.submit("fleet-upgrade", LONG)
    wait(lambda: running_on(fleet, target.worker, batch),
         f"an episode running on {target.worker}", HANG_S, *fleet.projects)
    draining = time.monotonic()
    target.project.run("stop", "--timeout", "90")  # SIGTERM: the worker drains
    drain_s = time.monotonic() - draining
    [stopped] = worker_log_events(target, "worker.stopped")
    # the master's status shows it leaving (its heartbeats stop: gone after the lease TTL)
    wait(lambda: not fleet.online(target.worker), f"{target.worker} gone in /v1/status", 300,
         *fleet.projects)
    gone = [w for w in fleet.status()["workers"] if w["id"] == before[0]["id"]]
    assert gone and gone[0]["online"] is False, gone
    assert 'class="worker-state">gone' in fleet.http.get("/").text
    assert target.desktops() == [], "the drained worker removes its desktop containers"

    target.set_env(CODA_WORKER_IMAGE=UPGRADE_TAG)
    target.project.run("up", "-d", "--no-build")
    image = docker("inspect", "-f", "{{.Config.Image}}", target.worker_container()).strip()
    assert image == UPGRADE_TAG, image
    back = wait(lambda: fleet.online(target.worker), f"{target.worker} back online", 300,
                *fleet.projects)
    assert back[0]["id"] != before[0]["id"], "a new registration of the upgraded worker"
    fleet.wait_finished(batch, "the batch finished across the upgrade")
    attempts = fleet.exactly_once(batch)
    # an episode the drain gave back ran again elsewhere (or here, after the upgrade)
    requeued = sum(1 for n in attempts.values() if n > 1)
    assert requeued <= stopped.get("cut_short", 0), (attempts, stopped)
    # it takes work again, on the new image
    again = fleet.submit("fleet-upgrade-back")
    fleet.wait_finished(again, "a batch after the upgrade")
    fleet.exactly_once(again)
    assert target.worker in fleet.rolled_out_by(again), fleet.rolled_out_by(again)
    FIGURES["rolling_upgrade"] = {
        "ok": True, "drain_grace_s": UPGRADE_GRACE_S, "drain_s": round(drain_s, 1),
        "finished_in_grace": stopped.get("finished_in_grace"),
        "episodes_requeued": requeued, "episodes_lost": 0, "episodes_doubled": 0,
        "image": image}
    log.info("fleet.rolling_upgrade", **FIGURES["rolling_upgrade"])


def test_4_down_leaves_nothing_of_the_fleet(fleet: Fleet) -> None:
    down(fleet)
    left = leftovers(fleet.prefix)
    assert left == {"containers": [], "networks": [], "volumes": []}, left
    for project in fleet.projects:
        assert project.containers() == [], f"{project.name}: containers left"
    FIGURES["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    if REPORT:
        Path(REPORT).write_text(json.dumps(FIGURES, indent=2))
