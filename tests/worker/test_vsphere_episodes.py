"""Episodes through the vSphere API: ``coda worker`` with provider ``vsphere`` against VMware's
simulator (tests/fixtures/vcsim.py), each slot a clone of a template VM whose guest is the
project's desktop image, rolls out ScienceBoard's TeXstudio task C-02 on the replay models
(recorded planner and executor outputs, everything else real) to the task's own checker's
success. A VM powered off through the vSphere API from outside mid-episode fails that attempt
with ``vm_off``; the retry succeeds on a fresh clone. Nothing is left afterwards: no VM of the
test's prefix, no container or volume of them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coda.logging import get_logger
from coda_app.vcsim import Vcsim, create_vm, desktop_run
from tests.fixtures.master import MasterProcess
from tests.fixtures.vcsim import leftovers, vm_prefix
from tests.fixtures.waiting import wait_for
from tests.worker.test_episodes import C02, C02_ACTIONS
from worker.providers.vsphere import find_vm, list_vms, task_result

from .workerproc import Rest, WorkerProcess, running_worker, worker_env

pytestmark = [pytest.mark.docker, pytest.mark.slow]
log = get_logger("tests.vsphere_episodes")
EPISODE_TIMEOUT = 300.0


@pytest.fixture
def fleet(vcsim: Vcsim, si: Any, desktop_vm_image: str) -> Iterator[dict[str, str]]:
    """A template VM of the desktop image for this test; the worker's provider options (JSON)
    under ``options``. Afterwards no VM, container or volume of the test's prefix is left."""
    prefix = vm_prefix()
    template = f"{prefix}-template"
    create_vm(si, template, desktop_run(desktop_vm_image, network=vcsim.network),
              snapshot="sci_bench", template=True)
    options = vcsim.options(mode="clone", template=template, clone_prefix=f"{prefix}-clone",
                            ready_timeout_s=120, ip_timeout_s=60)
    yield {"prefix": prefix, "clone": f"{prefix}-clone-0", "options": json.dumps(options)}
    names = sorted(n for _, n in list_vms(si) if n.startswith(prefix))
    tpl = find_vm(si, template)
    tpl.MarkAsVirtualMachine(pool=tpl.runtime.host.parent.resourcePool)
    task_result(si, tpl.Destroy_Task(), 60, "destroy the template")
    assert names == [template], f"the worker left VMs behind: {names}"
    assert leftovers(prefix) == {"containers": [], "volumes": []}


def _env(master: MasterProcess, replay: tuple[str, str], fleet: dict[str, str]) -> dict[str, str]:
    planner, executor = replay
    return worker_env(master, planner, executor, "http://127.0.0.1:9", kinds="episode",
                      provider="vsphere", provider_options=fleet["options"])


def _wait(rest: Rest, episode_id: str, worker: WorkerProcess) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        ep = rest.episode(episode_id)
        if ep["status"] == "failed":
            raise AssertionError(f"episode failed: {ep['error']}\n{worker.log()}")
        return ep if ep["status"] == "completed" else None

    return wait_for(probe, f"episode {episode_id}", EPISODE_TIMEOUT, logs=worker.log,
                    gone=worker.exited)


def _solved(ep: dict[str, Any], attempt: int) -> None:
    steps = [s for s in ep["steps"] if s["attempt"] == attempt]
    summary = [(s["attempt"], s["index"], (s["action"] or {}).get("type"), s["outcome"],
                s["error"]) for s in ep["steps"]]
    assert ep["success"] is True, summary
    assert [s["action"]["type"] for s in steps] == C02_ACTIONS, summary
    assert all(s["outcome"] == "ok" and s["screenshot"] for s in steps), summary


def _events(worker: WorkerProcess, event: str) -> list[dict[str, Any]]:
    text = worker.log_path.read_text(errors="replace")
    return [json.loads(line) for line in text.splitlines()
            if line.startswith("{") and f'"{event}"' in line]


def test_a_worker_on_vsphere_solves_the_texstudio_task(
        wmaster: MasterProcess, replay_services: tuple[str, str], fleet: dict[str, str],
        tmp_path: Path) -> None:
    rest = Rest(wmaster)
    episode_id = rest.submit([C02], judge="never")["episode_ids"][0]
    with running_worker(_env(wmaster, replay_services, fleet), tmp_path / "worker.log") as w:
        ep = _wait(rest, episode_id, w)
        booted = _events(w, "vsphere.booted")
    _solved(ep, attempt=1)
    assert booted and booted[0]["vm"] == fleet["clone"] and booted[0]["mode"] == "clone"
    log.info("vsphere_episode.succeeded", episode=episode_id, vm=fleet["clone"])
    (tmp_path / "episode.json").write_text(json.dumps(ep, indent=1))


def test_a_vm_powered_off_mid_episode_fails_the_attempt_and_the_retry_succeeds_on_a_fresh_vm(
        wmaster: MasterProcess, replay_services: tuple[str, str], fleet: dict[str, str],
        si: Any, tmp_path: Path) -> None:
    rest = Rest(wmaster)
    episode_id = rest.submit([C02], judge="never")["episode_ids"][0]
    with running_worker(_env(wmaster, replay_services, fleet), tmp_path / "worker.log") as w:
        wait_for(lambda: len(rest.episode(episode_id)["steps"] or []) >= 1,
                 "the first step", EPISODE_TIMEOUT, logs=w.log, gone=w.exited)
        vm = find_vm(si, fleet["clone"])
        off = vm._moId
        task_result(si, vm.PowerOffVM_Task(), 60, "power off from outside")
        ep = _wait(rest, episode_id, w)
        fresh = find_vm(si, fleet["clone"])
        assert fresh is not None and fresh._moId != off  # a new clone runs the retry
        assert str(fresh.runtime.powerState) == "poweredOn"
        failed = _events(w, "job.failed")
    assert rest.job(ep["job_id"])["attempts"] == 2
    assert failed and failed[0]["retry"] is True, failed
    assert failed[0]["error"].startswith("vm_off:"), failed
    _solved(ep, attempt=2)
