"""A desktop of the ``vsphere`` provider: one VM, given a clean disk at every reset in one of
two modes (docs/vsphere.md, "How a slot gets a clean desktop"): ``clone`` (destroy this slot's
clone, clone the template anew) or ``revert`` (revert this slot's VM to its snapshot, power it
off if the revert left it on, hand over the token); then powered on, its address taken from
VMware Tools, and its guest server probed. A guest call that fails on a VM that went off says
``vm_off``."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.client import HTTPException
from typing import Any, Protocol

from coda.actions import Action
from coda.contracts.desktop import (
    ActResult,
    BrokenReason,
    DesktopBroken,
    Health,
    ImageFormat,
    Observation,
    ProviderDown,
    ProviderFault,
)
from worker.providers.base import Desktop, GuestLayout, log
from worker.providers.client import GuestClient
from worker.providers.image import SCIENCEBOARD_IMAGE
from worker.providers.liveness import Mark, Verdict, stamp
from worker.providers.vsphere.api import (
    ALIVE_OPTION,
    ALIVE_TTL_OPTION,
    INSTANCE_OPTION,
    OWNER_OPTION,
    POLL_S,
    POWERED_ON,
    TOKEN_OPTION,
    find_snapshot,
    find_vm,
    read_props,
    server_time,
    task_result,
    typed_error,
    usable_ipv4,
)
from worker.providers.vsphere.settings import VsphereSettings
from worker.tokens import secret_value


@dataclass
class CloneSource:
    """The template and where its clones go (resolved once, again after a clone failed and at
    every probe)."""

    vm: Any
    folder: Any
    pool: Any
    datastore: Any
    snapshot: Any
    run_options: list[tuple[str, str]]


class Inventory(Protocol):
    """What a desktop asks of its provider: the shared connection, the template, and the
    verdict on a VM that has its slot's name (whose it is)."""

    def connection(self) -> Any: ...

    def claim(self, si: Any, vms: list[tuple[Any, str]]) -> list[tuple[Any, str, Verdict, Mark]]:
        ...

    def template(self, *, fresh: bool = False) -> CloneSource: ...

    def forget_template(self) -> None: ...


class VmGone(DesktopBroken):
    """The VM was destroyed (from outside, or by an earlier run)."""


class VsphereDesktop(Desktop):
    provider_name = "vsphere"

    def __init__(self, slot: int, settings: VsphereSettings, provider: Inventory) -> None:
        super().__init__(slot, ready_timeout_s=settings.ready_timeout_s)
        self.s = settings
        self.provider = provider
        self.vm: Any = None
        self.vm_name = (f"{settings.prefix}-{slot}" if settings.mode == "clone"
                        else settings.vm_names[slot])
        self.token = secret_value(settings.guest_token) or ""
        self.handover = settings.guestinfo_token
        self.ip: str | None = None
        self.cloned = False  # a clone of this slot was made by this process
        self.busy = threading.RLock()  # held by the VM's own tasks (the renewal skips them)

    # vSphere calls ---------------------------------------------------------------------

    @property
    def si(self) -> Any:
        return self.provider.connection()

    def _task(self, task: Any, what: str, timeout: float | None = None) -> Any:
        from pyVmomi import vmodl

        def cancel() -> None:
            try:
                task.CancelTask()
            except vmodl.MethodFault as exc:  # not cancelable, or already done
                log.warning("vsphere.cancel_failed", what=what, fault=type(exc).__name__)

        return task_result(self.si, task, self.s.task_timeout_s if timeout is None else timeout,
                           f"{what} {self.vm_name}", cancel=cancel)

    def _call(self, fn: Callable[[], Any], what: str) -> Any:
        """One vSphere call; its faults and transport errors become typed failures
        (:func:`typed_error`; the VM gone: :class:`VmGone`)."""
        from pyVmomi import vmodl

        try:
            return fn()
        except vmodl.fault.ManagedObjectNotFound as exc:
            raise VmGone(BrokenReason.VM_OFF, f"{what} {self.vm_name}: the VM is gone") from exc
        except (vmodl.MethodFault, OSError, HTTPException) as exc:
            raise typed_error(exc, self.s, f"{what} {self.vm_name}") from exc

    def _power(self) -> str:
        return str(self._call(lambda: read_props(self.si, self.vm, ["runtime.powerState"]),
                              "power state").get("runtime.powerState"))

    def _power_off(self) -> None:
        if self._power() == POWERED_ON:
            self._call(lambda: self._task(self.vm.PowerOffVM_Task(), "power off"), "power off")

    def _power_on(self) -> None:
        if self._power() != POWERED_ON:  # a snapshot with memory may leave it running
            self._call(lambda: self._task(self.vm.PowerOnVM_Task(), "power on"), "power on")

    def _set_token(self) -> None:
        """``guestinfo.coda.token`` of a powered-off VM, unless it already holds it."""
        from pyVmomi import vim

        def current() -> str | None:
            extra = read_props(self.si, self.vm, ["config.extraConfig"]).get(
                "config.extraConfig") or []
            found = [o.value for o in extra if o.key == TOKEN_OPTION]
            return str(found[-1]) if found else None

        if self._call(current, "read guestinfo") == self.token:
            return
        spec = vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key=TOKEN_OPTION,
                                                                     value=self.token)])
        self._call(lambda: self._task(self.vm.ReconfigVM_Task(spec=spec), "set guestinfo"),
                   "set guestinfo")

    # modes -----------------------------------------------------------------------------

    def _clone(self) -> None:
        """A new VM ``<prefix>-<slot>`` cloned from the template, with a new token and this
        worker process's owner marks (its name, its instance, a liveness mark). The template
        is looked up again when the clone fails (it may have been deleted and put back): a
        template or snapshot that is not there is :class:`ProviderDown` naming it."""
        started = time.monotonic()
        for fresh in (False, True):
            try:
                self.vm = self._clone_from(self.provider.template(fresh=fresh))
                break
            except ProviderDown:
                self.provider.forget_template()
                raise
            except DesktopBroken as exc:  # the template may be gone or changed: look again
                self.provider.forget_template()
                if fresh:
                    raise DesktopBroken(exc.reason, f"clone {self.vm_name}: {exc.detail}"
                                        if isinstance(exc, VmGone) else exc.detail) from exc
        log.info("vsphere.cloned", slot=self.slot, vm=self.vm_name, linked=self.s.linked,
                 seconds=round(time.monotonic() - started, 3))

    def _clone_from(self, source: CloneSource) -> Any:
        from pyVmomi import vim

        extra = [vim.option.OptionValue(key=k, value=v) for k, v in source.run_options]
        alive = self._call(lambda: server_time(self.si), "the time before cloning")
        extra += [vim.option.OptionValue(key=k, value=v) for k, v in (
            (OWNER_OPTION, self.s.owner), (INSTANCE_OPTION, self.s.instance),
            (ALIVE_OPTION, stamp(alive)), (ALIVE_TTL_OPTION, stamp(self.s.alive_ttl_s)))]
        if self.handover:
            self.token = secret_value(self.s.guest_token) or secrets.token_urlsafe(24)
            extra.append(vim.option.OptionValue(key=TOKEN_OPTION, value=self.token))
        location = vim.vm.RelocateSpec(pool=source.pool, datastore=source.datastore)
        if self.s.linked:
            location.diskMoveType = "createNewChildDiskBacking"
        spec = vim.vm.CloneSpec(location=location, powerOn=False, template=False,
                                snapshot=source.snapshot if self.s.linked else None,
                                config=vim.vm.ConfigSpec(extraConfig=extra))
        return self._call(lambda: self._task(
            source.vm.CloneVM_Task(folder=source.folder, name=self.vm_name, spec=spec),
            "clone"), "clone")

    def _take_name(self) -> None:
        """Before the first clone of this slot in this process: a VM that already has its
        name is taken to be destroyed when it is this process's or a stale one of this
        worker's name; one another worker owns, or a live process of this worker's name uses,
        is :class:`~worker.providers.base.ProviderConflict` (never touched)."""
        found = self._call(lambda: find_vm(self.si, self.vm_name), "find")
        if found is None:
            return
        claimed = self.provider.claim(self.si, [(found, self.vm_name)])
        if claimed:  # not gone meanwhile: this worker's to destroy
            self.vm = found

    def _destroy(self) -> None:
        """Power off and destroy this slot's clone (one destroyed from outside is fine). One
        that could not be destroyed (vSphere away) is kept track of: the next reset destroys
        it before cloning."""
        vm = self.vm
        if vm is None:
            return
        try:
            self._power_off()
            self._call(lambda: self._task(vm.Destroy_Task(), "destroy"), "destroy")
        except VmGone:
            log.warning("vsphere.already_gone", slot=self.slot, vm=self.vm_name)
        self.vm = None
        log.info("vsphere.destroyed", slot=self.slot, vm=self.vm_name)

    def _revert_vm(self) -> None:
        if self.vm is None:
            self.vm = self._call(lambda: find_vm(self.si, self.vm_name), "find")
            if self.vm is None:
                raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                                   f"no VM {self.vm_name!r}")
            if self.handover and not self.token:
                self.token = secrets.token_urlsafe(24)  # this VM's for the provider's life
        snap = self._call(lambda: find_snapshot(self.si, self.vm, self.s.snapshot),
                          "find snapshot")
        if snap is None:
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               f"VM {self.vm_name!r} has no snapshot {self.s.snapshot!r}")
        self._call(lambda: self._task(snap.RevertToSnapshot_Task(), "revert"), "revert")
        if self.handover:  # a snapshot with memory (or vcsim): boot, so the guest reads its token
            self._power_off()
            self._set_token()

    def _boot(self) -> GuestClient:
        with self.busy:
            if self.s.mode == "clone":
                if self.vm is None and not self.cloned:
                    self._take_name()
                self._destroy()
                self._clone()
                self.cloned = True
            else:
                self._revert_vm()
            self._power_on()
        ip = self.ip = self._guest_ip()
        rewrites = list(SCIENCEBOARD_IMAGE.command_rewrites) if self.s.debian_apps else []
        self.layout = GuestLayout(portlike=self.s.portlike,
                                  app_url=f"http://{ip}:{self.s.portlike}", rewrites=rewrites)
        log.info("vsphere.booted", slot=self.slot, vm=self.vm_name, ip=ip, mode=self.s.mode)
        return GuestClient(f"http://{ip}:{self.s.guest_port}", token=self.token or None)

    def _guest_ip(self) -> str:
        deadline = time.monotonic() + self.s.ip_timeout_s
        paths = ["runtime.powerState", "guest.ipAddress", "guest.toolsRunningStatus"]
        while True:
            props = self._call(lambda: read_props(self.si, self.vm, paths), "guest address")
            state = str(props.get("runtime.powerState"))
            if state != POWERED_ON:
                raise DesktopBroken(BrokenReason.VM_OFF,
                                    f"{self.vm_name} went {state} while booting")
            tools = str(props.get("guest.toolsRunningStatus"))
            ip = usable_ipv4(props.get("guest.ipAddress"))
            if ip is not None and (tools == "guestToolsRunning" or not self.s.tools_required):
                return ip
            if time.monotonic() >= deadline:
                raise DesktopBroken(BrokenReason.NO_GUEST_IP,
                                    f"VMware Tools reported no IPv4 address for {self.vm_name} "
                                    f"in {self.s.ip_timeout_s:g} s (tools: {tools})")
            time.sleep(POLL_S)

    # hooks -----------------------------------------------------------------------------

    def _start(self) -> GuestClient:
        return self._boot()

    def _revert(self) -> GuestClient | None:
        return self._boot()

    def _stop(self) -> None:
        try:
            with self.busy:
                if self.s.mode == "clone":
                    self._destroy()
                elif self.vm is not None:
                    self._power_off()
        except DesktopBroken as exc:  # reported; a clone left behind goes at the next start
            log.warning("vsphere.stop_failed", slot=self.slot, vm=self.vm_name,
                        reason=exc.reason, detail=exc.detail)

    def renew_alive(self, si: Any, at: float) -> None:
        """Renew this clone's liveness mark (``coda.alive``, vSphere's time ``at``); skipped
        while a task of the VM's own runs (a clone carries a fresh mark from its start)."""
        from pyVmomi import vim

        if self.s.mode != "clone" or not self.busy.acquire(blocking=False):
            return
        try:
            vm = self.vm
            if vm is None:
                return
            spec = vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key=ALIVE_OPTION,
                                                                         value=stamp(at))])
            self._call(lambda: task_result(si, vm.ReconfigVM_Task(spec=spec),
                                           self.s.call_timeout_s, f"renew {self.vm_name}"),
                       "renew the liveness mark of")
        finally:
            self.busy.release()

    def _machine_health(self) -> Health:
        if self.vm is None:
            return Health(ok=False, reason=BrokenReason.VM_OFF, detail="no VM")
        try:
            state = self._power()
        except DesktopBroken as exc:
            return Health(ok=False, reason=exc.reason, detail=exc.detail)
        if state != POWERED_ON:
            return Health(ok=False, reason=BrokenReason.VM_OFF,
                          detail=f"{self.vm_name} is {state}")
        return Health(ok=True)

    def _down(self) -> Health | None:
        h = self._machine_health()
        return None if h.ok else h

    # guest calls: a failure on a VM that went off says so ------------------------------

    def _went_off(self) -> Health | None:
        """After a failed guest call: whether the VM is (or within ``off_check_s`` turns) off
        or gone; a VM being powered off stops its guest before the hypervisor reports it."""
        deadline = time.monotonic() + self.s.off_check_s
        while True:
            h = self._machine_health()
            if not h.ok and h.reason is BrokenReason.VM_OFF:
                return h
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_S)

    def _explained(self, exc: DesktopBroken) -> DesktopBroken:
        if exc.reason not in (BrokenReason.AGENT_GONE, BrokenReason.NOT_ANSWERING):
            return exc
        off = self._went_off()
        if off is None:
            return exc
        return DesktopBroken(BrokenReason.VM_OFF, f"{off.detail} ({exc.detail})")

    def observe(self, *, fmt: ImageFormat = "png", width: int | None = None,
                height: int | None = None) -> Observation:
        try:
            return super().observe(fmt=fmt, width=width, height=height)
        except DesktopBroken as exc:
            raise self._explained(exc) from exc

    def act(self, action: Action) -> ActResult:
        try:
            return super().act(action)
        except DesktopBroken as exc:
            raise self._explained(exc) from exc
