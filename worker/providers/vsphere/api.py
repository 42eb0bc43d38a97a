"""A small pyVmomi library for the ``vsphere`` provider: a TLS context (system CAs, a
``ca_file``, or one pinned certificate), a logged-in connection that logs in again, vSphere's
errors typed (:func:`typed_error`), properties read through the PropertyCollector, VMs and
snapshots found, and tasks polled with a bound. Every call works around what vcsim does
differently from a real vCenter without weakening what a real one needs (docs/vsphere.md, "The
simulator for developers")."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import ssl
import time
from collections.abc import Callable, Iterator
from http.client import HTTPException
from typing import Any

from coda.contracts.desktop import BrokenReason, DesktopBroken, ProviderDown, ProviderFault
from coda.guestenv import TOKEN_KEY
from worker.providers.base import ProviderConfigError
from worker.providers.liveness import Mark, parse_time
from worker.providers.vsphere.settings import VsphereSettings

POLL_S = 0.1  # task state / guest address / power state polling interval
TOKEN_OPTION = f"guestinfo.{TOKEN_KEY}"
OWNER_OPTION = "coda.owner"  # extraConfig of a clone: the worker that made it (its name)
INSTANCE_OPTION = "coda.instance"  # ... the worker process that made it
ALIVE_OPTION = "coda.alive"  # ... when that process last renewed it (vSphere's clock, unix s)
ALIVE_TTL_OPTION = "coda.alive_ttl"  # ... how long a renewal holds (s)
POWERED_ON = "poweredOn"
THUMBPRINT_DIGESTS = {40: "sha1", 64: "sha256", 128: "sha512"}


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


def mark_of(extra: list[Any] | None, state: str = "") -> Mark:
    """A clone's owner marks from its extraConfig (the last value of each key counts)."""
    values = {str(o.key): str(o.value) for o in extra or []}
    alive, ttl = values.get(ALIVE_OPTION), values.get(ALIVE_TTL_OPTION)
    return Mark(owner=values.get(OWNER_OPTION), instance=values.get(INSTANCE_OPTION),
                alive=parse_time(alive) if alive is not None else None,
                ttl=parse_time(ttl) if ttl is not None else None, state=state)


def server_time(si: Any) -> float:
    """vSphere's own clock (unix seconds): the one every worker's liveness marks are read on."""
    return float(si.CurrentTime().timestamp())


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
