"""The ``vsphere`` provider: vCenter / ESXi through pyvmomi (none of the anchors has one).

Per slot one VM (by inventory path, or by name anywhere in the inventory). Reset: find the
snapshot by name in the VM's snapshot tree, ``RevertToSnapshot_Task``, ``PowerOnVM_Task`` when
the VM is not powered on, then the guest address from VMware Tools (``guest.ipAddress`` once
``toolsRunningStatus`` is ``guestToolsRunning``), bounded in time, then the shared readiness
probe. Tasks are polled (``info.state`` queued -> running -> success | error) with a bound.

Verified here only against recorded vSphere API call transcripts (tests/worker/transcripts);
it still needs a real vCenter or ESXi host to be verified.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason, DesktopBroken, Health
from worker.providers.base import Desktop, GuestLayout, Provider, log
from worker.providers.client import GuestClient
from worker.tokens import secret_value

POLL_S = 0.25  # task state / guest address polling interval


@dataclass
class VsphereSettings:
    host: str
    user: str
    password: SecretStr
    vm_names: list[str]  # one per slot: an inventory path ("dc/vm/folder/name") or a VM name
    snapshot: str = "sci_bench"
    port: int = 443
    insecure: bool = False  # accept a self-signed certificate
    guest_port: int = 5000
    guest_token: SecretStr | None = None
    portlike: int = 8000
    task_timeout_s: float = 600.0
    ip_timeout_s: float = 300.0
    ready_timeout_s: float = 300.0
    connect: Callable[[VsphereSettings], Any] | None = field(default=None, repr=False)


def smart_connect(s: VsphereSettings) -> Any:
    """A pyvmomi ServiceInstance (``SmartConnect``; ``disableSslCertValidation`` if insecure)."""
    from pyVim.connect import SmartConnect

    return SmartConnect(host=s.host, user=s.user, pwd=s.password.get_secret_value(),
                        port=s.port, disableSslCertValidation=s.insecure)


def wait_task(task: Any, timeout: float, what: str) -> Any:
    """Poll a vSphere task until success (its result) or error / timeout (DesktopBroken)."""
    deadline = time.monotonic() + timeout
    while True:
        state = str(task.info.state)
        if state == "success":
            return task.info.result
        if state == "error":
            msg = getattr(task.info.error, "msg", None) or str(task.info.error)
            raise DesktopBroken(BrokenReason.START_FAILED, f"{what}: {msg}")
        if time.monotonic() >= deadline:
            raise DesktopBroken(BrokenReason.NOT_ANSWERING, f"{what}: still {state} "
                                                            f"after {timeout:g} s")
        time.sleep(POLL_S)


def walk_snapshots(trees: list[Any]) -> Iterator[Any]:
    for node in trees or []:
        yield node
        yield from walk_snapshots(node.childSnapshotList)


class VsphereDesktop(Desktop):
    provider_name = "vsphere"

    def __init__(self, slot: int, settings: VsphereSettings, si: Any) -> None:
        super().__init__(slot, ready_timeout_s=settings.ready_timeout_s)
        self.s = settings
        self.si = si
        self.vm_name = settings.vm_names[slot]
        self.vm: Any = None

    def _find_vm(self) -> Any:
        content = self.si.RetrieveContent()
        if "/" in self.vm_name:
            vm = content.searchIndex.FindByInventoryPath(self.vm_name)
        else:
            from pyVmomi import vim

            view = content.viewManager.CreateContainerView(content.rootFolder,
                                                           [vim.VirtualMachine], True)
            try:
                vm = next((v for v in view.view if v.name == self.vm_name), None)
            finally:
                view.Destroy()
        if vm is None:
            raise DesktopBroken(BrokenReason.START_FAILED, f"no VM {self.vm_name!r}")
        return vm

    def _boot(self) -> GuestClient:
        vm = self.vm = self.vm or self._find_vm()
        tree = vm.snapshot.rootSnapshotList if vm.snapshot is not None else []
        snap = next((n.snapshot for n in walk_snapshots(tree) if n.name == self.s.snapshot), None)
        if snap is None:
            raise DesktopBroken(BrokenReason.START_FAILED,
                                f"VM {self.vm_name!r} has no snapshot {self.s.snapshot!r}")
        wait_task(snap.RevertToSnapshot_Task(), self.s.task_timeout_s, "revert")
        if str(vm.runtime.powerState) != "poweredOn":
            wait_task(vm.PowerOnVM_Task(), self.s.task_timeout_s, "power on")
        ip = self._guest_ip(vm)
        self.layout = GuestLayout(portlike=self.s.portlike,
                                  app_url=f"http://{ip}:{self.s.portlike}")
        log.info("vsphere.ready", slot=self.slot, vm=self.vm_name, ip=ip)
        return GuestClient(f"http://{ip}:{self.s.guest_port}",
                           token=secret_value(self.s.guest_token))

    def _guest_ip(self, vm: Any) -> str:
        deadline = time.monotonic() + self.s.ip_timeout_s
        while True:
            ip = vm.guest.ipAddress
            if str(vm.guest.toolsRunningStatus) == "guestToolsRunning" and ip and ":" not in ip:
                return str(ip)
            if time.monotonic() >= deadline:
                raise DesktopBroken(BrokenReason.NO_GUEST_IP,
                                    f"VMware Tools reported no IPv4 address for {self.vm_name!r} "
                                    f"in {self.s.ip_timeout_s:g} s")
            time.sleep(POLL_S)

    def _start(self) -> GuestClient:
        return self._boot()

    def _revert(self) -> GuestClient | None:
        return self._boot()

    def _stop(self) -> None:
        if self.vm is not None and str(self.vm.runtime.powerState) == "poweredOn":
            try:
                wait_task(self.vm.PowerOffVM_Task(), self.s.task_timeout_s, "power off")
            except DesktopBroken as exc:  # best effort: the next start reverts the snapshot
                log.warning("vsphere.stop_failed", slot=self.slot, detail=exc.detail)

    def _machine_health(self) -> Health:
        if self.vm is None:
            return Health(ok=False, reason=BrokenReason.VM_OFF, detail="not started")
        state = str(self.vm.runtime.powerState)
        if state != "poweredOn":
            return Health(ok=False, reason=BrokenReason.VM_OFF, detail=f"VM is {state}")
        return Health(ok=True)


class VsphereProvider(Provider[VsphereDesktop]):
    name = "vsphere"

    def __init__(self, settings: VsphereSettings) -> None:
        super().__init__()
        self.settings = settings
        self._si: Any = None

    def _make(self, slot: int) -> VsphereDesktop:
        if not 0 <= slot < len(self.settings.vm_names):
            raise ValueError(f"slot {slot}: only {len(self.settings.vm_names)} VMs configured")
        if self._si is None:
            self._si = (self.settings.connect or smart_connect)(self.settings)
        return VsphereDesktop(slot, self.settings, self._si)

    def close(self) -> None:
        super().close()
        if self._si is not None:
            from pyVim.connect import Disconnect

            Disconnect(self._si)
            self._si = None
