"""The ``vmware`` provider: VMware Workstation / Fusion through ``vmrun``.

Per slot a linked clone of the template VM (``vmrun clone <template> <slot.vmx> linked
-snapshot=<snapshot> -cloneName=<name>``, then a ``coda-clean`` snapshot of the clone), created
under a file lock so parallel workers never race for a name (OSWorld's complaint). Reset:
``revertToSnapshot`` to ``coda-clean``, ``start <vmx> nogui``, ``getGuestIPAddress <vmx> -wait``
bounded in time (it needs VMware Tools and hangs without them), then the shared readiness probe
on the guest server (OSWorld's / ScienceBoard's on :5000, or the project's agent with a token).
Every ``vmrun`` call is bounded too (``start nogui`` is reported to hang). ``vmrun`` prints its
errors on stdout as ``Error: ...`` with a non-zero exit status.

Verified here only against recorded ``vmrun`` transcripts (tests/worker/transcripts); it still
needs a real VMware host to be verified.
"""

from __future__ import annotations

import fcntl
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason, DesktopBroken, Health, ProviderDown, ProviderFault
from worker.providers.base import Desktop, GuestLayout, Provider, log
from worker.providers.client import GuestClient
from worker.tokens import secret_value

CLEAN_SNAPSHOT = "coda-clean"


@dataclass
class VmwareSettings:
    template_vmx: Path  # the image: OSWorld's / ScienceBoard's VM, or one with the CODA agent
    clones_dir: Path
    snapshot: str = "sci_bench"  # snapshot of the template the clones start from
    vmrun: str = "vmrun"
    host_type: str = "fusion" if platform.system() == "Darwin" else "ws"
    guest_port: int = 5000
    guest_token: SecretStr | None = None  # None for OSWorld's / ScienceBoard's server
    portlike: int = 8000
    command_timeout_s: float = 300.0
    ip_timeout_s: float = 300.0
    ready_timeout_s: float = 300.0


class VmrunError(RuntimeError):
    pass


class Vmrun:
    """``vmrun -T <type> <command> <vmx> [args]`` with a time bound."""

    def __init__(self, settings: VmwareSettings) -> None:
        self.s = settings

    def __call__(self, command: str, *args: str, timeout: float | None = None,
                 check: bool = True) -> str:
        argv = [self.s.vmrun, "-T", self.s.host_type, command, *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False,
                                  timeout=timeout or self.s.command_timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise DesktopBroken(BrokenReason.NOT_ANSWERING,
                                f"vmrun {command} did not return in {exc.timeout:g} s") from exc
        except FileNotFoundError as exc:
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               f"{self.s.vmrun} not found (VMware Workstation/Fusion)") from exc
        out = done.stdout.strip()
        if check and done.returncode != 0:
            raise VmrunError(f"vmrun {command}: {out or done.stderr.strip()} "
                             f"(exit {done.returncode})")
        return out


def check_template_file(s: VmwareSettings) -> None:
    if not s.template_vmx.is_file():
        raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                           f"provider_options.template_vmx: {s.template_vmx}: no such file")


def check_template(s: VmwareSettings, vmrun: Vmrun) -> None:
    """The template VM and its snapshot are there (:class:`ProviderDown` naming them)."""
    check_template_file(s)
    try:
        snapshots = vmrun("listSnapshots", str(s.template_vmx)).splitlines()[1:]
    except VmrunError as exc:
        raise ProviderDown(ProviderFault.UNREACHABLE, BrokenReason.START_FAILED, str(exc)) from exc
    if s.snapshot not in [line.strip() for line in snapshots]:
        raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                           f"{s.template_vmx} has no snapshot {s.snapshot!r}")


class VmwareDesktop(Desktop):
    provider_name = "vmware"

    def __init__(self, slot: int, settings: VmwareSettings) -> None:
        super().__init__(slot, ready_timeout_s=settings.ready_timeout_s)
        self.s = settings
        self.vmrun = Vmrun(settings)
        self.name = f"coda-slot-{slot}"
        self.vmx = settings.clones_dir / self.name / f"{self.name}.vmx"
        self.ip: str | None = None

    def _ensure_clone(self) -> None:
        """Create this slot's linked clone once, holding a lock over the clones directory."""
        self.s.clones_dir.mkdir(parents=True, exist_ok=True)
        with (self.s.clones_dir / ".coda-clone.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.vmx.exists():
                return
            check_template(self.s, self.vmrun)
            self.vmrun("clone", str(self.s.template_vmx), str(self.vmx), "linked",
                       f"-snapshot={self.s.snapshot}", f"-cloneName={self.name}")
            self.vmrun("snapshot", str(self.vmx), CLEAN_SNAPSHOT)
            log.info("vmware.cloned", slot=self.slot, vmx=str(self.vmx))

    def _boot(self) -> GuestClient:
        try:
            self.vmrun("revertToSnapshot", str(self.vmx), CLEAN_SNAPSHOT)
            self.vmrun("start", str(self.vmx), "nogui")
        except VmrunError as exc:
            raise DesktopBroken(BrokenReason.START_FAILED, str(exc)) from exc
        try:
            ip = self.vmrun("getGuestIPAddress", str(self.vmx), "-wait",
                            timeout=self.s.ip_timeout_s)
        except (VmrunError, DesktopBroken) as exc:
            raise DesktopBroken(BrokenReason.NO_GUEST_IP, str(exc)) from exc
        if not ip or ip.startswith("Error"):
            raise DesktopBroken(BrokenReason.NO_GUEST_IP, ip or "no address")
        self.ip = ip
        self.layout = GuestLayout(portlike=self.s.portlike,
                                  app_url=f"http://{ip}:{self.s.portlike}")
        return GuestClient(f"http://{ip}:{self.s.guest_port}",
                           token=secret_value(self.s.guest_token))

    def _start(self) -> GuestClient:
        try:
            self._ensure_clone()
        except VmrunError as exc:
            raise DesktopBroken(BrokenReason.START_FAILED, str(exc)) from exc
        return self._boot()

    def _revert(self) -> GuestClient | None:
        old = self.ip
        guest = self._boot()
        if self.ip == old:
            guest.close()
            return None
        return guest

    def _stop(self) -> None:
        if self.vmx.exists():
            try:
                self.vmrun("stop", str(self.vmx), "hard", check=False)
            except DesktopBroken as exc:  # stopping is best effort; the next start reverts
                log.warning("vmware.stop_failed", slot=self.slot, detail=exc.detail)

    def _machine_health(self) -> Health:
        try:
            running = self.vmrun("list").splitlines()[1:]
        except (VmrunError, DesktopBroken) as exc:
            return Health(ok=False, reason=BrokenReason.NOT_ANSWERING, detail=str(exc))
        target = os.path.normpath(os.path.abspath(self.vmx))
        if not any(os.path.normpath(os.path.abspath(line.strip())) == target for line in running):
            return Health(ok=False, reason=BrokenReason.VM_OFF, detail=f"{self.vmx} not running")
        return Health(ok=True)


class VmwareProvider(Provider[VmwareDesktop]):
    name = "vmware"

    def __init__(self, settings: VmwareSettings) -> None:
        super().__init__()
        self.settings = settings

    def probe(self) -> None:
        """The template VM is there, ``vmrun`` runs and answers (``list``), and the template
        has its snapshot."""
        check_template_file(self.settings)
        vmrun = Vmrun(self.settings)
        try:
            vmrun("list")
        except VmrunError as exc:
            raise ProviderDown(ProviderFault.UNREACHABLE, BrokenReason.NOT_ANSWERING,
                               str(exc)) from exc
        check_template(self.settings, vmrun)

    def _make(self, slot: int) -> VmwareDesktop:
        return VmwareDesktop(slot, self.settings)
