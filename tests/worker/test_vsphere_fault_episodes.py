"""``coda worker`` on vSphere (VMware's simulator, vcsim) through the faults a farm sees,
injected from outside through the vSphere API while the worker runs: the password rotated (the
worker's session ended), the template deleted and put back, the simulator killed and started
again, a second worker given the same clone prefix. Each episode runs with ``max_attempts`` 1,
so an attempt spent on the infrastructure would fail it for good: instead the job goes back
uncounted, the worker leases nothing and says why until the fault is gone, and the episode then
ends solved on its first attempt (ScienceBoard's TeXstudio task C-02 on the replay models, its
own checker). The other worker refuses to start, naming the first, whose VM it never touches.
Nothing is left afterwards: no VM of the test's prefix, no container or volume of them."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coda_app.vcsim import Vcsim, create_vm, desktop_run
from tests.fixtures.faults import Stopwatch, record
from tests.fixtures.master import MasterProcess
from tests.fixtures.vcsim import destroy_vm, end_other_sessions, leftovers, vm_prefix
from tests.fixtures.waiting import exited, wait_for
from tests.worker.test_episodes import C02, assert_c02_solved, wait_episode, wait_steps
from worker.providers.vsphere import find_vm, list_vms

from .workerproc import Rest, WorkerProcess, running_worker, worker_env

pytestmark = [pytest.mark.docker, pytest.mark.slow]
FAULT_TIMEOUT = 180.0


def _template(si: Any, sim: Vcsim, name: str, image: str) -> None:
    create_vm(si, name, desktop_run(image, network=sim.network), snapshot="sci_bench",
              template=True)


def _cleanup(si: Any, prefix: str, template: str) -> None:
    names = sorted(n for _, n in list_vms(si) if n.startswith(prefix))
    if template in names:
        destroy_vm(si, template)
    assert names == [template], f"the worker left VMs behind: {names}"
    assert leftovers(prefix) == {"containers": [], "volumes": []}


@pytest.fixture
def fleet(vcsim: Vcsim, si: Any, desktop_vm_image: str) -> Iterator[dict[str, str]]:
    """A template of the desktop image for this test and the worker's provider options."""
    prefix = vm_prefix()
    template = f"{prefix}-template"
    _template(si, vcsim, template, desktop_vm_image)
    options = vcsim.options(mode="clone", template=template, clone_prefix=f"{prefix}-clone",
                            ready_timeout_s=120, ip_timeout_s=60)
    yield {"prefix": prefix, "template": template, "options": json.dumps(options)}
    _cleanup(si, prefix, template)


def _env(master: MasterProcess, replay: tuple[str, str], options: str,
         **extra: Any) -> dict[str, str]:
    planner, executor = replay
    return worker_env(master, planner, executor, "http://127.0.0.1:9", kinds="episode",
                      provider="vsphere", provider_options=options, provider_probe_max_s="2",
                      **extra)


def _provider(rest: Rest) -> dict[str, Any] | None:
    workers = rest.get("/v1/workers")
    return workers[0]["provider"] if workers else None


def _ok(rest: Rest, worker: WorkerProcess) -> None:
    wait_for(lambda: (p := _provider(rest)) and p["ok"], "the provider ready", FAULT_TIMEOUT,
             logs=worker.log, gone=worker.exited)


def _given_back(rest: Rest, worker: WorkerProcess, episode_id: str,
                fault: str) -> dict[str, Any]:
    """Wait until the episode's job was given back for ``fault``; the worker's provider state
    (with ``seconds``: since the call). The episode is queued again, no attempt counted."""
    watch = Stopwatch()
    state: dict[str, Any] = wait_for(
        lambda: (p := _provider(rest)) and p["given_back"] >= 1 and p,
        "the job given back", FAULT_TIMEOUT, logs=worker.log, gone=worker.exited)
    assert state["fault"] == fault and not state["ok"], state
    ep = rest.episode(episode_id)
    job = rest.job(ep["job_id"])
    assert ep["status"] == "queued" and job["attempts"] == 0, (ep, job)
    assert job["error"].startswith(f"released: provider_down: {fault}: "), job
    return {**state, "seconds": watch.s()}


def _resumed(rest: Rest, worker: WorkerProcess, episode_id: str, fault: str,
             given_back: dict[str, Any], **figures: Any) -> None:
    """Once the fault is gone: the episode is leased again (how long that took is recorded),
    then ends solved on its first attempt."""
    watch = Stopwatch()
    wait_for(lambda: rest.episode(episode_id)["status"] != "queued", "leased again",
             FAULT_TIMEOUT, logs=worker.log, gone=worker.exited)
    record(fault, given_back_after_submit_s=given_back["seconds"],
           leased_after_fix_s=watch.s(), **figures)
    assert_c02_solved(wait_episode(rest, episode_id, worker), attempt=1)
    record(fault, attempts=rest.job(rest.episode(episode_id)["job_id"])["attempts"],
           episodes_failed=0)


def test_a_password_rotated_while_a_worker_runs_costs_no_attempt(
        wmaster: MasterProcess, replay_services: tuple[str, str], fleet: dict[str, str],
        vcsim: Vcsim, si: Any, tmp_path: Path) -> None:
    rest = Rest(wmaster)
    before = vcsim.password
    with running_worker(_env(wmaster, replay_services, fleet["options"]),
                        tmp_path / "worker.log") as worker:
        _ok(rest, worker)
        try:
            vcsim.change_password("rotated-" + secrets.token_hex(8))
            assert end_other_sessions(si) >= 1  # the worker's session ends with it
            [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
            state = _given_back(rest, worker, episode_id, "credentials_refused")
            assert state["detail"].endswith(f"login of {vcsim.user!r} refused"), state
        finally:
            vcsim.change_password(before)  # the worker's password is right again
        _resumed(rest, worker, episode_id, "vsphere_password_rotated", state)


def test_a_template_deleted_and_put_back_while_a_worker_runs_costs_no_attempt(
        wmaster: MasterProcess, replay_services: tuple[str, str], fleet: dict[str, str],
        vcsim: Vcsim, si: Any, desktop_vm_image: str, tmp_path: Path) -> None:
    rest = Rest(wmaster)
    with running_worker(_env(wmaster, replay_services, fleet["options"]),
                        tmp_path / "worker.log") as worker:
        _ok(rest, worker)  # its probe found the template
        destroy_vm(si, fleet["template"])
        [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
        state = _given_back(rest, worker, episode_id, "missing")
        assert state["detail"] == f"no template VM {fleet['template']!r}", state
        _template(si, vcsim, fleet["template"], desktop_vm_image)  # put back: a new VM
        _resumed(rest, worker, episode_id, "vsphere_template_deleted", state)


def test_a_simulator_killed_and_started_again_costs_no_attempt(
        wmaster: MasterProcess, replay_services: tuple[str, str], vcsim_bin: Path,
        desktop_vm_image: str, tmp_path: Path) -> None:
    """vSphere killed (SIGKILL: its VMs and sessions gone) while the worker runs, then back on
    the same address with a new certificate and an inventory made anew."""
    sim = Vcsim(binary=vcsim_bin, workdir=tmp_path / "vcsim")
    sim.start()
    prefix = vm_prefix()
    template = f"{prefix}-template"
    try:
        si = sim.connect()
        _template(si, sim, template, desktop_vm_image)
        options = json.dumps(sim.options(mode="clone", template=template,
                                         clone_prefix=f"{prefix}-clone", ready_timeout_s=120,
                                         ip_timeout_s=60))
        rest = Rest(wmaster)
        with running_worker(_env(wmaster, replay_services, options),
                            tmp_path / "worker.log") as worker:
            _ok(rest, worker)
            sim.kill()
            [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
            state = _given_back(rest, worker, episode_id, "unreachable")
            assert f"vSphere 127.0.0.1:{sim.port}" in state["detail"], state
            watch = Stopwatch()
            sim = Vcsim(binary=vcsim_bin, workdir=tmp_path / "vcsim", user=sim.user,
                        password=sim.password, listen_port=sim.port)
            sim.start()
            si = sim.connect()
            _template(si, sim, template, desktop_vm_image)
            _resumed(rest, worker, episode_id, "vsphere_simulator_killed", state,
                     simulator_back_s=watch.s())
        _cleanup(si, prefix, template)
    finally:
        if sim.proc is not None:
            assert sim.stop() == 0, sim.log()


def test_a_second_worker_on_the_same_clone_prefix_refuses_to_start_and_touches_nothing(
        wmaster: MasterProcess, replay_services: tuple[str, str], fleet: dict[str, str],
        si: Any, tmp_path: Path) -> None:
    rest = Rest(wmaster)
    [episode_id] = rest.submit([C02], judge="never", max_attempts=1)["episode_ids"]
    first = _env(wmaster, replay_services, fleet["options"], name="worker-a")
    with running_worker(first, tmp_path / "worker-a.log") as a:
        wait_steps(rest, episode_id, 1, a)
        clone = find_vm(si, f"{fleet['prefix']}-clone-0")
        second = WorkerProcess(env=_env(wmaster, replay_services, fleet["options"],
                                        name="worker-b"), log_path=tmp_path / "worker-b.log")
        second.start()
        try:
            wait_for(exited(second.proc, "worker-b"), "worker-b to stop", FAULT_TIMEOUT,
                     logs=second.log)
            assert second.proc is not None and second.proc.returncode == 4, second.log()
            assert "is in use by worker 'worker-a'" in second.log(), second.log()
            assert f"{fleet['prefix']}-clone-0 (worker-a, poweredOn)" in second.log()
        finally:
            second.stop()
        after = find_vm(si, f"{fleet['prefix']}-clone-0")
        assert after._moId == clone._moId and str(after.runtime.powerState) == "poweredOn"
        ep = wait_episode(rest, episode_id, a)
    assert_c02_solved(ep, attempt=1)
    assert rest.job(ep["job_id"])["attempts"] == 1
    record("vsphere_two_workers_one_prefix", second_worker_exit=4, first_worker_vms_touched=0,
           attempts=1, episodes_failed=0)
