"""The ``vsphere`` provider: desktops that are VMs of a vCenter / ESXi, through pyvmomi.

Two ways to give a slot a clean desktop (``mode``):

* ``clone`` (default): a slot's VM is a clone of a template VM, ``<clone_prefix>-<slot>``
  (linked to the template's ``snapshot`` when ``linked``); reset destroys it and clones a new
  one, so every episode starts on a fresh disk. Clones left by an earlier run (the names
  ``<clone_prefix>-<n>``) are removed when the provider first connects. This is the mode that
  suits VMware's simulator vcsim, where a clone is a new container, and it is how many real
  farms reset (linked or instant clones): more vSphere work per reset, nothing kept between
  episodes.
* ``revert``: one existing VM per slot (``vm_names``), reverted to its ``snapshot`` at each
  reset, then booted: on a real vCenter the disk really reverts, the fastest reset there. A VM
  still powered on after the revert (a snapshot with memory, or vcsim, whose revert changes
  nothing) is powered off first, so its guest boots and reads its token. Under vcsim the disk
  does not revert: its desktops come clean only because the desktop image restores its home at
  every boot (``CODA_DESKTOP_HOME_TEMPLATE``, set by ``coda_app/vcsim.py``).

The guest's token reaches it as the VM's ``guestinfo.coda.token`` (extraConfig; read inside by
VMware Tools' RPC or, under vcsim, from ``VMX_GUESTINFO_CODA_TOKEN``: see
:mod:`worker.guest.guestinfo`): never on a command line or in a log. A clone gets a new one;
a reverted VM keeps one for the provider's life (set again after every revert: a vcsim
container keeps the environment of its first start). ``guest_token`` fixes it instead (an
image with the token baked in); ``guestinfo_token`` false hands nothing over (OSWorld's and
ScienceBoard's server take no token): a VM then reverted to a snapshot with memory keeps running
as the snapshot left it (ScienceBoard's image, whose desktop needs a password login once).
The address is VMware Tools' ``guest.ipAddress`` (IPv4, not link-local) once Tools report
running (``tools_required``; vcsim has no Tools and never says so). Every vSphere task is
polled through the PropertyCollector (``info.state``, ``info.error``, ``info.result``) with a
bound, and cancelled when it passes it; every API call has an HTTP time bound too.

Broken slots carry typed reasons: a VM powered off or destroyed from outside is ``vm_off``
(also when a guest call fails and the VM turns out to be off), no address in time
``no_guest_ip``, a guest server that does not answer ``agent_gone`` / ``not_answering``, a
vSphere fault ``start_failed`` with its message.

pyvmomi against vcsim 0.24 (verified, and handled without weakening what a real vCenter
needs): reading ``task.info`` of ``RevertToSnapshot_Task`` raises ``TypeError`` (vcsim names
the snapshot as the task's entity; pyvmomi's type check refuses it), so tasks are read by
property path, as pyVim's own ``WaitForTask`` does; reading an unset property as an attribute
(a template's ``resourcePool``, the ``snapshot`` of a VM without one) makes vcsim panic and drop
the connection, so properties that may be unset are read through the PropertyCollector too,
where they are simply absent; a clone gets only the extraConfig of its
clone spec (a real vCenter copies the template's), so the template's ``RUN.*`` keys (vcsim's
container definition; a real template has none) are passed in the spec; pyvmomi skips
certificate checks for a host named ``localhost`` / ``127.0.0.1`` unless given an SSL context,
so the provider always passes its own (system CAs, or ``ca_file``; ``insecure`` to skip).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.client import HTTPException
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

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
from coda.guestenv import TOKEN_KEY
from worker.providers.base import (
    Desktop,
    GuestLayout,
    Provider,
    ProviderConfigError,
    ProviderConflict,
    log,
    owner_slug,
)
from worker.providers.client import GuestClient
from worker.providers.image import SCIENCEBOARD_IMAGE
from worker.tokens import secret_value

POLL_S = 0.1  # task state / guest address / power state polling interval
TOKEN_OPTION = f"guestinfo.{TOKEN_KEY}"
OWNER_OPTION = "coda.owner"  # extraConfig of a clone: the worker that made it
POWERED_ON = "poweredOn"
THUMBPRINT_DIGESTS = {40: "sha1", 64: "sha256", 128: "sha512"}


@dataclass
class VsphereSettings:
    """Options of the vsphere provider (``provider_options``)."""

    host: str
    user: str
    password: SecretStr
    mode: Literal["clone", "revert"] = "clone"
    template: str | None = None  # clone: the template VM (inventory path "dc/vm/f/name" or name)
    clone_prefix: str | None = None  # clone: slot VMs are <prefix>-<slot> (coda-<owner>)
    owner: str = field(default_factory=socket.gethostname)  # the worker's name (its clones
    # carry it in extraConfig coda.owner; its clean-up removes only those)
    linked: bool = True  # clone: linked clones of the template's snapshot (else full copies)
    folder: str | None = None  # clone: inventory path of the clones' folder (template's)
    resource_pool: str | None = None  # clone: inventory path (template's, or its host's root)
    datastore: str | None = None  # clone: datastore name (default: where the template is)
    vm_names: list[str] = field(default_factory=list)  # revert: one VM per slot (path or name)
    snapshot: str = "sci_bench"  # revert: reverted to; clone: what linked clones start from
    port: int = 443
    ca_file: Path | None = None  # PEM bundle that signs the server's certificate (default: system)
    insecure: bool = False  # no certificate check (a simulator with a throw-away certificate)
    thumbprint: str | None = None  # trust exactly the certificate with this SHA-1/256/512
    # fingerprint (hex, colons allowed), instead of a CA: a self-signed vCenter or ESXi
    tools_required: bool = True  # the address counts once VMware Tools run (vcsim: false)
    guest_port: int = 5000
    guest_token: SecretStr | None = None  # default: a random one per VM, through guestinfo
    guestinfo_token: bool = True  # hand the token over as guestinfo.coda.token (false: none,
    # for OSWorld's / ScienceBoard's server; a VM left running by a memory snapshot stays so)
    portlike: int = 8000
    debian_apps: bool = False  # VMs of the project's desktop image: task paths to Debian's apps
    call_timeout_s: float = 120.0  # one vSphere API call (HTTP)
    task_timeout_s: float = 600.0
    ip_timeout_s: float = 300.0
    ready_timeout_s: float = 300.0
    off_check_s: float = 5.0  # a guest call failed: how long to watch whether the VM went off

    @property
    def prefix(self) -> str:
        """The clones' name prefix: ``clone_prefix``, else the worker's own ``coda-<name>``."""
        return self.clone_prefix or f"coda-{owner_slug(self.owner)}"

    @property
    def where(self) -> str:
        return f"vSphere {self.host}:{self.port}"


def normal_thumbprint(value: str) -> str:
    """A certificate fingerprint as lower-case hex without colons; ProviderConfigError when it
    is not a SHA-1, SHA-256 or SHA-512 one."""
    hexed = value.replace(":", "").strip().lower()
    if len(hexed) not in THUMBPRINT_DIGESTS or not re.fullmatch(r"[0-9a-f]+", hexed):
        raise ProviderConfigError("provider_options.thumbprint: not a SHA-1, SHA-256 or SHA-512 "
                                  "fingerprint in hex (40, 64 or 128 digits, colons allowed)")
    return hexed


def thumbprint_of(der: bytes, digits: int = 64) -> str:
    """The fingerprint of a certificate (DER) with as many hex digits as a pinned one."""
    return hashlib.new(THUMBPRINT_DIGESTS[digits], der).hexdigest()


class ThumbprintMismatch(OSError):
    """The server's certificate is not the pinned one."""


class PinnedContext(ssl.SSLContext):
    """TLS that trusts exactly one certificate, by its fingerprint (``thumbprint``), checked on
    every connection after the handshake; no CA, no host name. (pyvmomi's own pinning checks
    only the first connection: it turns the shared context's verification off for good.)"""

    pinned = ""

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        sock = super().wrap_socket(*args, **kwargs)
        seen = thumbprint_of(sock.getpeercert(binary_form=True) or b"", len(self.pinned))
        if not hmac.compare_digest(seen, self.pinned):
            sock.close()
            raise ThumbprintMismatch(f"certificate thumbprint {seen} is not the pinned "
                                     f"{self.pinned} (provider_options.thumbprint)")
        return sock


def ssl_context(s: VsphereSettings) -> ssl.SSLContext:
    """Always an explicit context: pyvmomi checks nothing for a loopback host without one. A
    ``ca_file`` that cannot be read, or is no PEM bundle, is :class:`ProviderDown` naming it."""
    if s.thumbprint:
        pinned = PinnedContext(ssl.PROTOCOL_TLS_CLIENT)
        pinned.check_hostname = False
        pinned.verify_mode = ssl.CERT_NONE
        pinned.pinned = normal_thumbprint(s.thumbprint)
        return pinned
    cafile = None
    if s.ca_file is not None:
        cafile = str(s.ca_file)
        try:
            s.ca_file.read_bytes()
        except OSError as exc:
            raise ProviderDown(ProviderFault.MISCONFIGURED, BrokenReason.START_FAILED,
                               f"provider_options.ca_file: {s.ca_file}: cannot be read "
                               f"({exc.strerror or exc})") from exc
    try:
        context = ssl.create_default_context(cafile=cafile)
    except ssl.SSLError as exc:
        raise ProviderDown(ProviderFault.MISCONFIGURED, BrokenReason.START_FAILED,
                           f"provider_options.ca_file: {s.ca_file}: not a PEM bundle of CA "
                           f"certificates ({exc.reason or exc})") from exc
    if s.insecure:  # asked for: a simulator's throw-away certificate
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def fault_message(fault: object) -> str:
    """A vSphere fault's message (``msg``), else its type's name (never its whole repr)."""
    return str(getattr(fault, "msg", None) or type(fault).__name__)


def typed_error(exc: BaseException, s: VsphereSettings, what: str = "") -> DesktopBroken:
    """The typed failure of an error of a vSphere call. The infrastructure's (no answer, a
    refused login, an untrusted certificate) are :class:`ProviderDown`; a fault vSphere
    answered for the call itself is ``start_failed``."""
    from pyVmomi import vim, vmodl

    where = f"{what}: {s.where}" if what else s.where
    if isinstance(exc, ThumbprintMismatch):
        return ProviderDown(ProviderFault.MISCONFIGURED, BrokenReason.START_FAILED,
                            f"{where}: {exc}")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ProviderDown(ProviderFault.MISCONFIGURED, BrokenReason.START_FAILED,
                            f"{where}: certificate not trusted ({exc.reason}): set ca_file to "
                            "the CA that signed it (or thumbprint to its fingerprint)")
    if isinstance(exc, vim.fault.InvalidLogin | vim.fault.NotAuthenticated):
        return ProviderDown(ProviderFault.CREDENTIALS_REFUSED, BrokenReason.START_FAILED,
                            f"{where}: login of {s.user!r} refused")
    if isinstance(exc, vmodl.MethodFault):
        return DesktopBroken(BrokenReason.START_FAILED,
                             f"{what or s.where}: {type(exc).__name__}: {fault_message(exc)}")
    return ProviderDown(ProviderFault.UNREACHABLE, BrokenReason.NOT_ANSWERING, f"{where}: {exc}")


def _stub(s: VsphereSettings, context: ssl.SSLContext) -> Any:
    from pyVim.connect import SmartStubAdapter

    try:
        return SmartStubAdapter(host=s.host, port=s.port, sslContext=context,
                                httpConnectionTimeout=s.call_timeout_s)
    except (OSError, HTTPException):
        raise
    # pyvmomi says "down or not a VIM server" with a bare Exception (an XML parser's error for
    # a page that is no version list): the endpoint is not vSphere's API, typed and raised
    except Exception as exc:
        raise ProviderDown(ProviderFault.MISCONFIGURED, BrokenReason.START_FAILED,
                           f"{s.where}: not a vSphere API endpoint "
                           f"({type(exc).__name__}: {str(exc)[:200]})") from exc


def smart_connect(s: VsphereSettings) -> Any:
    """A pyvmomi ServiceInstance, logged in; failures become typed: the infrastructure's
    (:func:`typed_error`, a ``ca_file`` that cannot be read, an endpoint that is not vSphere)
    are :class:`ProviderDown` naming the file or host:port.

    Its stub logs in again when the session expired (vCenter ends idle sessions, 30 minutes by
    default: a worker idle overnight would otherwise fail every call with ``NotAuthenticated``)
    and retries a call once after a transport error, so one call takes at most twice
    ``call_timeout_s``."""
    from pyVim.connect import VimSessionOrientedStub
    from pyVmomi import vim, vmodl

    def login(soap: Any) -> None:  # pyVim's own reads currentSession first, which vcsim refuses
        manager: Any = vim.ServiceInstance("ServiceInstance", soap).RetrieveContent().sessionManager
        manager.Login(s.user, s.password.get_secret_value(), None)

    context = ssl_context(s)
    try:
        stub = _stub(s, context)
        si = vim.ServiceInstance("ServiceInstance",
                                 VimSessionOrientedStub(stub, login, retryCount=2))
        si.RetrieveContent()  # logs in
        return si
    except (vmodl.MethodFault, OSError, HTTPException) as exc:  # refused, unreachable, TLS
        raise typed_error(exc, s) from exc


# property reads ----------------------------------------------------------------------------


def read_props(si: Any, obj: Any, paths: list[str]) -> dict[str, Any]:
    """Properties of one managed object by path (``info.state``, ``runtime.powerState``)
    through the PropertyCollector; unset ones are absent. An object that is gone raises
    ``ManagedObjectNotFound``."""
    from pyVmomi import vmodl

    pc = vmodl.query.PropertyCollector
    spec = pc.FilterSpec(objectSet=[pc.ObjectSpec(obj=obj)],
                         propSet=[pc.PropertySpec(type=type(obj), pathSet=paths)])
    result = si.content.propertyCollector.RetrievePropertiesEx([spec], pc.RetrieveOptions())
    if result is None or not result.objects:  # nothing to see: it is not there (any more)
        raise vmodl.fault.ManagedObjectNotFound(obj=obj)
    found = result.objects[0]
    for missing in found.missingSet or []:
        if isinstance(missing.fault, vmodl.fault.ManagedObjectNotFound):
            raise missing.fault
    return {p.name: p.val for p in found.propSet}


def list_vms(si: Any) -> list[tuple[Any, str]]:
    """Every VM of the inventory with its name, in one PropertyCollector walk."""
    from pyVmomi import vim, vmodl

    pc = vmodl.query.PropertyCollector
    content = si.content
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    try:
        walk = pc.TraversalSpec(name="view", path="view", skip=False, type=vim.view.ContainerView)
        spec = pc.FilterSpec(objectSet=[pc.ObjectSpec(obj=view, skip=True, selectSet=[walk])],
                             propSet=[pc.PropertySpec(type=vim.VirtualMachine, pathSet=["name"])])
        collector = content.propertyCollector
        result = collector.RetrievePropertiesEx([spec], pc.RetrieveOptions())
        found: list[tuple[Any, str]] = []
        while result is not None:
            found += [(o.obj, str(o.propSet[0].val)) for o in result.objects if o.propSet]
            result = collector.ContinueRetrievePropertiesEx(result.token) if result.token else None
        return found
    finally:
        view.Destroy()


def find_vm(si: Any, name: str) -> Any:
    """A VM by inventory path (``dc/vm/folder/name``) or by name anywhere (None: no such VM)."""
    if "/" in name:
        return si.content.searchIndex.FindByInventoryPath(name)
    return next((vm for vm, n in list_vms(si) if n == name), None)


def owner_of(si: Any, vm: Any) -> str | None:
    """The worker a VM belongs to (its ``coda.owner`` extraConfig; None: not marked)."""
    extra = read_props(si, vm, ["config.extraConfig"]).get("config.extraConfig") or []
    found = [str(o.value) for o in extra if o.key == OWNER_OPTION]
    return found[-1] if found else None


def conflict_message(s: VsphereSettings, vms: list[tuple[str, str | None, str]]) -> str:
    """Why a worker refuses its clone prefix: the VMs of it that are not its own
    ``(name, owner, power state)``, named with their owners."""
    owners = sorted({o for _, o, _ in vms if o is not None})
    listed = ", ".join(f"{n} ({o or 'no owner mark'}{', ' + p if p else ''})"
                       for n, o, p in vms[:10])
    who = (f"worker {', '.join(repr(o) for o in owners)}" if owners
           else "VMs without an owner mark (made by hand or by an older CODA worker)")
    return (f"clone prefix {s.prefix!r} is in use by {who}: {listed}; this worker "
            f"({s.owner!r}) never touches VMs it does not own: give it another clone_prefix "
            "(its default, coda-<worker name>, is its own) or a distinct CODA_WORKER_NAME, or "
            "remove those VMs")


def walk_snapshots(trees: list[Any] | None) -> Iterator[Any]:
    for node in trees or []:
        yield node
        yield from walk_snapshots(node.childSnapshotList)


def find_snapshot(si: Any, vm: Any, name: str) -> Any | None:
    """A snapshot of ``vm`` by name, anywhere in its tree."""
    info = read_props(si, vm, ["snapshot"]).get("snapshot")
    tree = info.rootSnapshotList if info is not None else []
    return next((n.snapshot for n in walk_snapshots(tree) if n.name == name), None)


def usable_ipv4(value: object) -> str | None:
    """An address the worker can reach: IPv4, not link-local, not unspecified."""
    try:
        ip = ipaddress.ip_address(str(value))
    except ValueError:
        return None
    if ip.version != 4 or ip.is_link_local or ip.is_unspecified:
        return None
    return str(ip)


# tasks -------------------------------------------------------------------------------------


def wait_task(read: Callable[[], dict[str, Any]], timeout: float, what: str, *,
              cancel: Callable[[], None] | None = None,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> Any:
    """Poll a task's ``info.state`` (``read`` returns its properties by path) until success
    (its ``info.result``) or error (:class:`DesktopBroken` with the fault), at most
    ``timeout`` seconds; past that it is cancelled when possible and the wait fails typed."""
    deadline = clock() + timeout
    while True:
        info = read()
        state = str(info.get("info.state", "queued"))
        if state == "success":
            return info.get("info.result")
        if state == "error":
            raise DesktopBroken(BrokenReason.START_FAILED, f"{what}: {fault_text(info)}")
        if clock() >= deadline:
            if cancel is not None:
                cancel()
            raise DesktopBroken(BrokenReason.NOT_ANSWERING,
                                f"{what}: still {state} after {timeout:g} s")
        sleep(POLL_S)


TASK_PATHS = ["info.state", "info.error", "info.result"]


def task_result(si: Any, task: Any, timeout: float, what: str, *,
                cancel: Callable[[], None] | None = None) -> Any:
    """:func:`wait_task` on a task of ``si``, read by property path."""
    return wait_task(lambda: read_props(si, task, TASK_PATHS), timeout, what, cancel=cancel)


def fault_text(info: dict[str, Any]) -> str:
    error = info.get("info.error")
    fault = getattr(error, "fault", None)
    name = type(fault).__name__ if fault is not None else "fault"
    message = getattr(error, "localizedMessage", None) or getattr(fault, "msg", None)
    return f"{name}: {message or error}"


class VmGone(DesktopBroken):
    """The VM was destroyed (from outside, or by an earlier run)."""


class VsphereDesktop(Desktop):
    provider_name = "vsphere"

    def __init__(self, slot: int, settings: VsphereSettings, provider: VsphereProvider) -> None:
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
        worker's owner mark. The template is looked up again when the clone fails (it may have
        been deleted and put back): a template or snapshot that is not there is
        :class:`ProviderDown` naming it."""
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
        extra.append(vim.option.OptionValue(key=OWNER_OPTION, value=self.s.owner))
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
        name is this worker's from before (destroyed) or another's (:class:`ProviderConflict`,
        never touched)."""
        found = self._call(lambda: find_vm(self.si, self.vm_name), "find")
        if found is None:
            return
        owner = self._call(lambda: owner_of(self.si, found), "read the owner of")
        if owner != self.s.owner:
            raise ProviderConflict(conflict_message(self.s, [(self.vm_name, owner, "")]))
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
            if self.s.mode == "clone":
                self._destroy()
            elif self.vm is not None:
                self._power_off()
        except DesktopBroken as exc:  # reported; a clone left behind goes at the next start
            log.warning("vsphere.stop_failed", slot=self.slot, vm=self.vm_name,
                        reason=exc.reason, detail=exc.detail)

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


class VsphereProvider(Provider[VsphereDesktop]):
    name = "vsphere"

    def __init__(self, settings: VsphereSettings) -> None:
        super().__init__()
        if settings.mode == "clone" and not settings.template:
            raise ProviderConfigError("provider_options.template: the clone mode needs the "
                                      "template VM to clone")
        if settings.mode == "revert" and not settings.vm_names:
            raise ProviderConfigError("provider_options.vm_names: the revert mode needs one VM "
                                      "per slot")
        if settings.thumbprint is not None:
            normal_thumbprint(settings.thumbprint)
        self.settings = settings
        self._si: Any = None
        self._source: CloneSource | None = None
        self._cleaned = False  # the clones an earlier run left were removed
        self._lock = threading.RLock()

    def probe(self) -> None:
        """Connected and logged in (a new connection after a failure: a restarted server, a
        new certificate), the session answering, and the template with its snapshot (clone
        mode, looked up afresh) or every configured VM with its snapshot (revert mode)."""
        with self._lock:
            try:
                si = self.connection()
                self._guarded(si.CurrentTime, "the session")
                if self.settings.mode == "clone":
                    self._source = self._resolve_template()
                else:
                    self._check_vms(si)
            except ProviderDown:
                self._si, self._source = None, None
                raise

    def _check_vms(self, si: Any) -> None:
        names = {n: vm for vm, n in self._guarded(lambda: list_vms(si), "list VMs")}

        def check(name: str) -> None:
            vm = names.get(name) if "/" not in name else find_vm(si, name)
            if vm is None:
                raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                                   f"no VM {name!r}")
            if find_snapshot(si, vm, self.settings.snapshot) is None:
                raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                                   f"VM {name!r} has no snapshot {self.settings.snapshot!r}")

        for name in self.settings.vm_names:
            self._guarded(partial(check, name), f"check {name!r}")

    def _guarded(self, fn: Callable[[], Any], what: str) -> Any:
        """A vSphere call of the provider's own; its errors typed (:func:`typed_error`)."""
        from pyVmomi import vmodl

        try:
            return fn()
        except (vmodl.MethodFault, OSError, HTTPException) as exc:
            raise typed_error(exc, self.settings, what) from exc

    def _make(self, slot: int) -> VsphereDesktop:
        if self.settings.mode == "revert" and not 0 <= slot < len(self.settings.vm_names):
            raise ValueError(f"slot {slot}: only {len(self.settings.vm_names)} VMs configured")
        return VsphereDesktop(slot, self.settings, self)

    def connection(self) -> Any:
        """The service instance, connected at first use (then, in clone mode, the clones an
        earlier run of this worker left are removed, once in the provider's life)."""
        with self._lock:
            if self._si is None:
                self._si = smart_connect(self.settings)
                about = self._guarded(lambda: self._si.content.about, "about")
                log.info("vsphere.connected", host=self.settings.host, server=about.fullName,
                         api=about.apiVersion, mode=self.settings.mode)
            if self.settings.mode == "clone" and not self._cleaned:
                self._cleaned = True  # its desktops call back in here
                try:
                    self.remove_stale()
                except BaseException:
                    self._cleaned = False  # again at the next connection
                    raise
            return self._si

    def remove_stale(self) -> list[str]:
        """Destroy the clones an earlier run of this worker left: the VMs named
        ``<prefix>-<n>`` marked with its owner. VMs of the prefix that another worker marked
        (or nobody: made by hand, or by an older worker) are never touched: the worker refuses
        to go on, naming their owner (:class:`ProviderConflict`)."""
        si = self._si
        pattern = re.compile(rf"{re.escape(self.settings.prefix)}-\d+")
        found = [(vm, name) for vm, name in self._guarded(lambda: list_vms(si), "list VMs")
                 if pattern.fullmatch(name)]
        mine, others = [], []
        for vm, name in found:
            props = self._guarded(partial(read_props, si, vm, [
                "config.extraConfig", "runtime.powerState"]), f"read {name}")
            owner = next((str(o.value) for o in reversed(props.get("config.extraConfig") or [])
                          if o.key == OWNER_OPTION), None)
            if owner == self.settings.owner:
                mine.append((vm, name))
            else:
                others.append((name, owner, str(props.get("runtime.powerState", ""))))
        if others:
            raise ProviderConflict(conflict_message(self.settings, others))
        for vm, name in mine:
            d = VsphereDesktop(0, self.settings, self)
            d.vm, d.vm_name = vm, name
            d._stop()
        if mine:
            log.warning("vsphere.stale_removed", prefix=self.settings.prefix,
                        vms=[name for _, name in mine])
        return [name for _, name in mine]

    def template(self, *, fresh: bool = False) -> CloneSource:
        """The template VM, its snapshot (linked clones) and the clones' folder, resource pool
        and datastore (the options, else the template's own); looked up again when ``fresh``
        or forgotten (:meth:`forget_template`)."""
        with self._lock:
            if self._source is None or fresh:
                self._source = self._resolve_template()
            return self._source

    def forget_template(self) -> None:
        """A clone failed: the next one looks the template up again (it may have been deleted
        and put back, under a new identity)."""
        with self._lock:
            self._source = None

    def _resolve_template(self) -> CloneSource:
        s = self.settings
        name = s.template
        assert name is not None
        si = self.connection()
        vm = self._guarded(lambda: find_vm(si, name), "find the template")
        if vm is None:
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               f"no template VM {s.template!r}")
        props = self._guarded(lambda: read_props(si, vm, [
            "parent", "resourcePool", "runtime.host", "config.extraConfig"]), "read the template")
        snapshot = self._guarded(lambda: find_snapshot(si, vm, s.snapshot),
                                 "find the template's snapshot") if s.linked else None
        if s.linked and snapshot is None:
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               f"template {s.template!r} has no snapshot {s.snapshot!r} to link "
                               "clones to (take one, or set linked to false)")
        host = props["runtime.host"]
        folder = self._inventory(s.folder, "folder") if s.folder else props["parent"]
        if s.resource_pool:
            pool = self._inventory(s.resource_pool, "resource_pool")
        else:  # a template has no pool: its host's (cluster's) root pool
            pool = props.get("resourcePool") or self._guarded(
                lambda: host.parent.resourcePool, "the template host's pool")
        datastore = None
        if s.datastore:
            datastore = next((d for d in self._guarded(lambda: host.datastore, "datastores")
                              if d.name == s.datastore), None)
            if datastore is None:
                raise DesktopBroken(BrokenReason.START_FAILED,
                                    f"no datastore {s.datastore!r} on the template's host")
        run = [(str(o.key), str(o.value)) for o in props.get("config.extraConfig") or []
               if str(o.key).startswith("RUN.")]
        return CloneSource(vm=vm, folder=folder, pool=pool, datastore=datastore,
                           snapshot=snapshot, run_options=run)

    def _inventory(self, path: str, option: str) -> Any:
        si = self.connection()
        found = self._guarded(lambda: si.content.searchIndex.FindByInventoryPath(path),
                              f"find {path!r}")
        if found is None:
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               f"provider_options.{option}: nothing at {path!r}")
        return found

    def close(self) -> None:
        super().close()
        with self._lock:
            si, self._si = self._si, None
        if si is not None:
            from pyVim.connect import Disconnect

            try:
                Disconnect(si)
            except (OSError, HTTPException) as exc:  # the server went first: no session left
                log.warning("vsphere.disconnect_failed", error=str(exc))
