"""The vsphere provider against VMware's own simulator, vcsim (https, a certificate and
credentials of its own), with VMs that are desktops: each VM runs the project's desktop image
as a container the simulator starts when the VM powers on. The same provider contract as the
local and docker providers, in both reset modes; clean resets; the token through guestinfo
only; typed reasons for broken slots; stale clones removed at start; vSphere task faults and
bounds; the server's certificate checked. Each test's VMs carry a name prefix of its own, and
nothing of them is left behind (VMs, containers, volumes)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from coda.contracts.desktop import BrokenReason, DesktopBroken, Health
from coda_app.vcsim import Vcsim, create_vm, desktop_run, idle_run
from tests.fixtures.vcsim import leftovers, template_vm, vm_names_of, vsphere_provider
from tests.fixtures.waiting import wait_for
from worker.providers.base import ProviderConflict
from worker.providers.conformance import check_desktop
from worker.providers.factory import make_provider
from worker.providers.vsphere import (
    VsphereDesktop,
    VsphereProvider,
    find_vm,
    task_result,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _container(d: VsphereDesktop) -> str:
    """The name vcsim gave the container of a desktop's VM."""
    return f"vcsim-{d.vm_name}-{d.vm.config.uuid}"


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def _dirty(d: VsphereDesktop) -> None:
    """What an episode leaves: a file in the home and in /tmp, an application window."""
    guest = d.guest
    assert guest is not None
    out = guest.execute("echo left > ~/atelier/left.txt && echo left > /tmp/left.txt",
                        shell=True)
    assert out.returncode == 0, out
    guest.launch(["xterm"])
    wait_for(lambda: guest.windows(), "the xterm window", 30, interval=0.1)


def _clean(d: VsphereDesktop) -> None:
    guest = d.guest
    assert guest is not None
    out = guest.execute("ls ~/atelier/left.txt /tmp/left.txt", shell=True)
    assert out.returncode != 0 and "left.txt" not in out.output, out
    assert guest.windows() == []


# ----------------------------------------------------------------------------- contract


def test_clone_mode_passes_the_provider_contract_and_resets_to_a_fresh_vm(
        si: Any, prefix: str, clones: Callable[..., VsphereProvider]) -> None:
    with clones() as provider:
        d = provider.desktop(0)
        check_desktop(d)  # reset, observe, act, reset again, close twice, closed refuses
        assert vm_names_of(si, prefix) == [f"{prefix}-template"]  # close destroyed the clone
        d.reset()
        first = d.vm._moId
        _dirty(d)
        d.reset()  # the old clone destroyed, a new one cloned from the template
        assert d.vm._moId != first and find_vm(si, f"{prefix}-clone-0") is not None
        _clean(d)
        assert d.guest is not None and d.guest.kind.value == "coda"
        assert d.layout.app_url.startswith("http://172.") or d.layout.app_url.startswith("http")
        assert ("/app/bin/kalgebra", "kalgebra") in d.layout.rewrites  # the desktop image's apps
    assert vm_names_of(si, prefix) == [f"{prefix}-template"]


def test_revert_mode_passes_the_provider_contract_and_reverts_clean(
        vcsim: Vcsim, si: Any, prefix: str, desktop_vm_image: str) -> None:
    name = f"{prefix}-vm-0"
    create_vm(si, name, desktop_run(desktop_vm_image, network=vcsim.network),
              snapshot="sci_bench")
    with vsphere_provider(vcsim, mode="revert", vm_names=[name]) as provider:
        d = provider.desktop(0)
        check_desktop(d)
        d.reset()
        vm = d.vm._moId
        _dirty(d)
        d.reset()  # revert, power cycle (vcsim's revert leaves the VM on), boot, home restored
        assert d.vm._moId == vm
        _clean(d)
    assert str(find_vm(si, name).runtime.powerState) == "poweredOff"  # close powers it off


def test_without_a_guestinfo_token_a_running_vm_is_not_power_cycled(
        vcsim: Vcsim, si: Any, prefix: str, desktop_vm_image: str) -> None:
    """OSWorld's / ScienceBoard's server takes no token, and ScienceBoard's desktop needs a
    password login once: a revert to a snapshot with memory leaves the VM running, and the
    provider must not reboot it (vcsim's revert leaves it running too). Here the desktop
    image's token is baked into the VM (``guest_token``) instead of handed over."""
    token = "baked-into-the-image-0123456789"
    name = f"{prefix}-vm-0"
    baked = ["--env", f"CODA_GUEST_TOKEN={token}"]
    create_vm(si, name, desktop_run(desktop_vm_image, network=vcsim.network, options=baked),
              snapshot="sci_bench")
    with vsphere_provider(vcsim, mode="revert", vm_names=[name], guestinfo_token=False,
                   guest_token=token) as provider:
        d = provider.desktop(0)
        d.reset()  # powered off: powered on
        started = _docker("inspect", "-f", "{{.State.StartedAt}}", _container(d))
        d.reset()  # reverted, still running: not power cycled
        assert _docker("inspect", "-f", "{{.State.StartedAt}}", _container(d)) == started
        assert d.health().ok
        assert "guestinfo.coda.token" not in {o.key for o in d.vm.config.extraConfig}


# ----------------------------------------------------------------------------- the token


def test_the_token_reaches_the_guest_through_guestinfo_only(
        vcsim: Vcsim, clones: Callable[..., VsphereProvider],
        capfd: pytest.CaptureFixture[str]) -> None:
    import httpx

    with clones() as provider:
        d = provider.desktop(0)
        d.reset()
        token = d.token
        assert len(token) >= 16
        extra = {o.key: o.value for o in d.vm.config.extraConfig}
        assert extra["guestinfo.coda.token"] == token  # the VM's guestinfo
        container = _container(d)
        env = _docker("inspect", "-f", "{{json .Config.Env}}", container)
        assert f"VMX_GUESTINFO_CODA_TOKEN={token}" in env  # vcsim's stand-in for Tools' RPC
        argv = _docker("inspect", "-f", "{{json .Config.Cmd}} {{json .Config.Entrypoint}} "
                       "{{json .Args}}", container)
        assert token not in argv
        processes = _docker("top", container)  # every process with its command line
        assert token not in processes and "worker.guest" in processes
        apps = d.guest.execute("env", shell=True).output  # type: ignore[union-attr]
        assert token not in apps and "VMX_GUESTINFO" not in apps  # applications never see it
        assert d.guest is not None
        refused = httpx.get(f"{d.guest.base_url}/screenshot", timeout=10)
        assert refused.status_code == 401  # the guest wants it
        d.reset()
        assert d.token != token  # a new clone, a new token
    assert token not in capfd.readouterr().out + capfd.readouterr().err
    assert token not in vcsim.log()


# ----------------------------------------------------------------------------- broken slots


def test_a_vm_powered_off_from_outside_is_vm_off_and_replaced(
        si: Any, clones: Callable[..., VsphereProvider]) -> None:
    with clones() as provider:
        d = provider.desktop(0)
        d.reset()
        vm = find_vm(si, d.vm_name)
        task_result(si, vm.PowerOffVM_Task(), 60, "power off from outside")
        with pytest.raises(DesktopBroken) as err:
            d.observe()  # the guest call fails, and the provider says why
        assert err.value.reason is BrokenReason.VM_OFF
        health = d.health()
        assert not health.ok and health.reason is BrokenReason.VM_OFF
        d.reset()
        assert d.replacements == 1 and d.last_broken is not None
        assert d.last_broken.reason is BrokenReason.VM_OFF
        assert d.health().ok and d.vm._moId != vm._moId


def test_a_vm_destroyed_from_outside_is_vm_off_and_replaced(
        si: Any, clones: Callable[..., VsphereProvider]) -> None:
    with clones() as provider:
        d = provider.desktop(0)
        d.reset()
        vm = find_vm(si, d.vm_name)
        task_result(si, vm.PowerOffVM_Task(), 60, "power off")
        task_result(si, vm.Destroy_Task(), 60, "destroy from outside")
        health = d.health()
        assert health.reason is BrokenReason.VM_OFF and "gone" in health.detail
        d.reset()
        assert d.replacements == 1 and d.health().ok


def test_an_agent_gone_is_reported_and_the_slot_replaced(
        clones: Callable[..., VsphereProvider]) -> None:
    with clones(off_check_s=0.5) as provider:
        d = provider.desktop(0)
        d.reset()
        # the agent dies; the session stops the desktop and its container exits, while the
        # VM stays powered on (what a guest server crash looks like to vSphere)
        _docker("exec", _container(d), "pkill", "-f", "worker.guest")
        def broken() -> Health | None:
            h = d.health()
            return None if h.ok else h

        health = wait_for(broken, "a broken health", 30, interval=0.2)
        assert health.reason is BrokenReason.AGENT_GONE, health
        with pytest.raises(DesktopBroken) as err:
            d.observe()
        assert err.value.reason is BrokenReason.AGENT_GONE  # not off: the VM still runs
        d.reset()
        assert d.replacements == 1 and d.health().ok


def test_no_address_in_time_is_no_guest_ip(vcsim: Vcsim, si: Any, prefix: str,
                                           desktop_vm_image: str) -> None:
    template = template_vm(si, prefix, desktop_run(desktop_vm_image,
                                                 options=["--network", "none"]))
    with vsphere_provider(vcsim, mode="clone", template=template, clone_prefix=f"{prefix}-clone",
                   ip_timeout_s=2) as provider:
        with pytest.raises(DesktopBroken) as err:
            provider.desktop(0).reset()
        assert err.value.reason is BrokenReason.NO_GUEST_IP


def test_only_this_workers_stale_clones_are_removed_at_start(
        vcsim: Vcsim, si: Any, prefix: str, clones: Callable[..., VsphereProvider]) -> None:
    """What an earlier run of this worker left (clones marked with its name by a process
    that is gone: its liveness mark no longer renewed) goes at start; VMs of the prefix
    without its mark (by hand, another worker's) are never touched: the provider refuses to
    go on, naming them."""
    clone = f"{prefix}-clone"
    crashed = clones(owner="worker-a", alive_interval_s=1, alive_ttl_s=3)
    crashed.desktop(0).reset()
    left = crashed.desktop(0).vm._moId
    crashed._desktops.clear()  # the worker died: its clone was never destroyed
    crashed.close()  # nor its liveness mark renewed: stale 3 s after its last renewal
    create_vm(si, f"{clone}-keep", None)  # not a slot's name: not the provider's
    with clones(owner="worker-a") as provider:
        provider.probe()
        assert vm_names_of(si, prefix) == [f"{clone}-keep", f"{prefix}-template"]
        assert find_vm(si, f"{clone}-0") is None and left
    assert leftovers(f"{clone}-0") == {"containers": [], "volumes": []}
    on = create_vm(si, f"{clone}-3", idle_run(network=vcsim.network))  # made by hand
    task_result(si, on.PowerOnVM_Task(), 60, "power on")
    with clones(owner="worker-a") as provider:
        with pytest.raises(ProviderConflict) as err:
            provider.probe()
        assert f"{clone}-3 (no owner mark, poweredOn)" in str(err.value)
        assert str(find_vm(si, f"{clone}-3").runtime.powerState) == "poweredOn"  # untouched


# ----------------------------------------------------------------------------- tasks, TLS


def test_task_faults_are_typed_and_tasks_are_read_by_property_path(
        si: Any, prefix: str) -> None:
    vm = create_vm(si, f"{prefix}-vm", None, snapshot="sci_bench")
    with pytest.raises(DesktopBroken) as err:  # powering off a VM that is off: a task error
        task_result(si, vm.PowerOffVM_Task(), 60, "power off")
    assert err.value.reason is BrokenReason.START_FAILED
    assert "InvalidPowerState" in err.value.detail
    revert = vm.snapshot.rootSnapshotList[0].snapshot.RevertToSnapshot_Task()
    with pytest.raises(TypeError):  # pyvmomi's type check against vcsim's task entity
        _ = revert.info
    task_result(si, revert, 60, "revert")  # read by path: fine


def test_an_expired_session_logs_in_again(clones: Callable[..., VsphereProvider]) -> None:
    """vCenter ends idle sessions (30 minutes by default): the next call is refused
    ``NotAuthenticated``, and the provider's connection logs in again and repeats it."""
    with clones() as provider:
        d = provider.desktop(0)
        d.reset()
        si = provider.connection()
        si.content.sessionManager.Logout()  # what an expiry leaves behind
        task_result(si, d.vm.PowerOffVM_Task(), 60, "power off")  # refused, logged in, done
        assert si.content.sessionManager.currentSession is not None
        health = d.health()
        assert health.reason is BrokenReason.VM_OFF, health
        d.reset()
        assert d.health().ok


def test_the_server_certificate_is_checked_and_a_bad_login_typed(vcsim: Vcsim) -> None:
    options = {k: v for k, v in vcsim.options().items() if k != "ca_file"}
    # 127.0.0.1: pyvmomi alone would skip the check for a loopback host
    with make_provider("vsphere", {**options, "mode": "revert", "vm_names": ["x"]}) as p:
        with pytest.raises(DesktopBroken) as err:
            p.desktop(0).reset()
        assert err.value.reason is BrokenReason.START_FAILED
        assert "certificate not trusted" in err.value.detail
    wrong = {**vcsim.options(), "password": "wrong-password", "mode": "revert",
             "vm_names": ["x"]}
    with make_provider("vsphere", wrong) as p:
        with pytest.raises(DesktopBroken) as err:
            p.desktop(0).reset()
        assert "login of 'coda' refused" in err.value.detail
        assert "wrong-password" not in err.value.detail
    insecure = {**options, "insecure": True, "mode": "revert", "vm_names": ["x"]}
    with make_provider("vsphere", insecure) as p:
        with pytest.raises(DesktopBroken) as err:
            p.desktop(0).reset()
        assert err.value.detail == "no VM 'x'"  # connected, without the certificate
