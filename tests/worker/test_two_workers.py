"""Two ``coda worker`` processes of one name on one host (the default name, the host's, and so
the same clone or container prefix): the second must never take the first one's running desktop
for a stale one of its own. It refuses to start (exit code 4), naming the prefix option and the
first worker with its instance, and the first one's VM or container stays and its episode ends
solved. Once the first worker is killed (SIGKILL: its desktop stays, its liveness mark is no
longer renewed), a new worker of that name removes the stale desktop at its start.

Against one vcsim (clone mode) and one Docker engine (desktop containers), with ScienceBoard's
TeXstudio task C-02 on the replay models. Nothing of the test is left afterwards."""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coda_app.vcsim import Vcsim, desktop_run
from tests.fixtures.master import MasterProcess
from tests.fixtures.vcsim import template_vm
from tests.fixtures.waiting import wait_for
from tests.worker.test_episodes import C02, assert_c02_solved, wait_episode, wait_steps
from worker.providers.docker_desktop import PREFIX_LABEL
from worker.providers.vsphere import find_vm

from .workerproc import Rest, WorkerProcess, running_worker, worker_env

pytestmark = [pytest.mark.docker, pytest.mark.slow]
HOST = socket.gethostname()  # both workers' name: the default, the host's
ALIVE = {"alive_interval_s": "1", "alive_ttl_s": "30"}  # renewed every second, stale after 30 s
TIMEOUT = 240.0


def _marks(vm: Any) -> dict[str, str]:
    """A VM's extraConfig (the owner marks: coda.owner, coda.instance, coda.alive)."""
    return {str(o.key): str(o.value) for o in vm.config.extraConfig or []}


def _env(master: MasterProcess, replay: tuple[str, str], provider: str,
         options: dict[str, Any]) -> dict[str, str]:
    planner, executor = replay
    return worker_env(master, planner, executor, "http://127.0.0.1:9", kinds="episode",
                      name=HOST, provider=provider, provider_options=json.dumps(options),
                      provider_probe_max_s="2", **ALIVE)


def _second_refuses(env: dict[str, str], log_path: Path,
                    untouched: Callable[[], bool]) -> str:
    """Start a second worker of the same name; wait until it exits (or, the failure this
    guards against, the first one's desktop is gone); its log."""
    second = WorkerProcess(env=env, log_path=log_path)
    second.start()
    try:
        def decided() -> str | None:
            if not untouched():
                return "destroyed"
            return "exited" if second.proc is not None and second.proc.poll() is not None \
                else None

        outcome = wait_for(decided, "the second worker to refuse", TIMEOUT, logs=second.log)
        assert outcome == "exited", ("the second worker destroyed the first one's running "
                                     f"desktop:\n{second.log()}")
        assert second.proc is not None and second.proc.returncode == 4, second.log()
        return second.full_log()
    finally:
        second.stop()


def _stale_removed(env: dict[str, str], log_path: Path, gone: Callable[[], bool],
                   instance: str, event: str) -> None:
    """A new worker of that name, after the first one was killed, removes its stale desktop."""
    with running_worker(env, log_path) as third:
        def removed() -> str | None:
            said = [line for line in third.full_log().splitlines() if event in line]
            return said[0] if said and gone() else None

        line = wait_for(removed, "the stale desktop removed", TIMEOUT, logs=third.log,
                        gone=third.exited)
        assert instance in line, line


# ----------------------------------------------------------------------------- vSphere


def test_two_workers_of_one_name_on_one_vcenter_never_destroy_each_others_clones(
        wmaster: MasterProcess, replay_services: tuple[str, str], vcsim: Vcsim, si: Any,
        prefix: str, desktop_vm_image: str, tmp_path: Path) -> None:
    template = template_vm(si, prefix, desktop_run(desktop_vm_image, network=vcsim.network))
    env = _env(wmaster, replay_services, "vsphere", vcsim.options(
        mode="clone", template=template, clone_prefix=f"{prefix}-clone", ready_timeout_s=120,
        ip_timeout_s=60))
    clone = f"{prefix}-clone-0"
    rest = Rest(wmaster)
    [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
    with running_worker(env, tmp_path / "worker-1.log") as first:
        wait_steps(rest, episode_id, 1, first)
        vm = find_vm(si, clone)
        marks = _marks(vm)

        def untouched() -> bool:
            now = find_vm(si, clone)
            return now is not None and now._moId == vm._moId

        log = _second_refuses(env, tmp_path / "worker-2.log", untouched)
        assert marks["coda.owner"] == HOST and marks.get("coda.instance"), marks
        instance = marks["coda.instance"]
        assert (f"clone_prefix '{prefix}-clone' is in use by another live process of worker "
                f"'{HOST}' (instance {instance}): {clone} ({HOST}, instance {instance}, alive "
                "mark renewed") in log, log
        assert untouched() and str(find_vm(si, clone).runtime.powerState) == "poweredOn"
        assert_c02_solved(wait_episode(rest, episode_id, first), attempt=1)
        assert _marks(find_vm(si, clone))["coda.alive"] != marks["coda.alive"]  # renewed
        first.kill()
    assert untouched()  # left behind by the killed worker
    _stale_removed(env, tmp_path / "worker-3.log", lambda: find_vm(si, clone) is None,
                   instance, "vsphere.stale_removed")


# ----------------------------------------------------------------------------- Docker


@pytest.fixture
def container_prefix(docker_client: Any, desktop_image: str) -> Iterator[str]:
    """A name prefix of this test's containers; none may be left after it."""
    p = f"coda-test-{secrets.token_hex(3)}"
    yield p
    left = docker_client.containers.list(all=True, filters={"label": f"{PREFIX_LABEL}={p}"})
    for c in left:
        c.remove(force=True)
    assert [c.name for c in left] == []


def test_two_workers_of_one_name_on_one_docker_engine_never_remove_each_others_containers(
        wmaster: MasterProcess, replay_services: tuple[str, str], container_prefix: str,
        docker_client: Any, tmp_path: Path) -> None:
    from docker.errors import NotFound

    env = _env(wmaster, replay_services, "docker",
               {"name_prefix": container_prefix, "ready_timeout_s": 120})
    name = f"{container_prefix}-0"
    rest = Rest(wmaster)
    [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]

    def container() -> Any:
        with contextlib.suppress(NotFound):
            return docker_client.containers.get(name)
        return None

    with running_worker(env, tmp_path / "worker-1.log") as first:
        wait_steps(rest, episode_id, 1, first)
        made = container()

        def untouched() -> bool:
            now = container()
            return now is not None and now.id == made.id

        log = _second_refuses(env, tmp_path / "worker-2.log", untouched)
        instance = made.labels.get("coda.desktop.instance")
        assert made.labels["coda.desktop.owner"] == HOST and instance, made.labels
        assert (f"name_prefix '{container_prefix}' is in use by another live process of worker "
                f"'{HOST}' (instance {instance}): {name} ({HOST}, instance {instance}, alive "
                "mark renewed") in log, log
        assert untouched() and container().status == "running"
        assert_c02_solved(wait_episode(rest, episode_id, first), attempt=1)
        first.kill()
    assert untouched()  # left behind by the killed worker
    _stale_removed(env, tmp_path / "worker-3.log", lambda: container() is None, instance,
                   "docker.stale_removed")
