"""The ``vsphere`` provider: desktops that are VMs of a vCenter / ESXi, through pyvmomi
(docs/vsphere.md). One connection for all its desktops (:mod:`.api`), the clones an earlier run
of this worker left removed at the first connection (never a VM another worker owns, nor one a
live process of this worker's name uses: :mod:`worker.providers.liveness`), each clone's
liveness mark renewed while this process lives, the template (clone mode) resolved once and
again after a failed clone, and probes that check the session and the template or the slot VMs
with their snapshots."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from functools import partial
from http.client import HTTPException
from typing import Any

from coda.contracts.desktop import BrokenReason, DesktopBroken, ProviderDown, ProviderFault
from worker.providers.base import Provider, ProviderConfigError, ProviderConflict, log
from worker.providers.liveness import (
    REFUSED,
    Mark,
    Renewer,
    Verdict,
    check_alive,
    conflict_message,
    sort_out,
)
from worker.providers.vsphere.api import (
    find_snapshot,
    find_vm,
    list_vms,
    mark_of,
    normal_thumbprint,
    read_props,
    server_time,
    smart_connect,
    typed_error,
)
from worker.providers.vsphere.desktop import CloneSource, VsphereDesktop
from worker.providers.vsphere.settings import VsphereSettings


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
        check_alive(settings.alive_interval_s, settings.alive_ttl_s)
        self.settings = settings
        self._si: Any = None
        self._source: CloneSource | None = None
        self._cleaned = False  # the clones an earlier run left were removed
        self._lock = threading.RLock()
        self._renewer = Renewer("vsphere", settings.alive_interval_s, self._renew)

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
        if self.settings.mode == "clone":
            self._renewer.start()
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
        ``<prefix>-<n>`` marked with its name by a process that is gone (:meth:`claim`). VMs of
        the prefix that another worker marked (or nobody: made by hand), or that a live process
        of this worker's name uses, are never touched: the worker refuses to go on, naming
        their owner (:class:`ProviderConflict`)."""
        si = self._si
        pattern = re.compile(rf"{re.escape(self.settings.prefix)}-\d+")
        found = [(vm, name) for vm, name in self._guarded(lambda: list_vms(si), "list VMs")
                 if pattern.fullmatch(name)]
        stale = [(vm, name, mark) for vm, name, v, mark in self.claim(si, found)
                 if v is Verdict.STALE]
        for vm, name, _ in stale:
            d = VsphereDesktop(0, self.settings, self)
            d.vm, d.vm_name = vm, name
            d._stop()
        if stale:
            log.warning("vsphere.stale_removed", prefix=self.settings.prefix,
                        vms=[name for _, name, _ in stale],
                        instances=sorted({str(m.instance) for _, _, m in stale}))
        return [name for _, name, _ in stale]

    def claim(self, si: Any, vms: list[tuple[Any, str]]) -> list[tuple[Any, str, Verdict, Mark]]:
        """The verdicts on VMs with this provider's slot names, by their owner marks: this
        process's (``MINE``) or a process's of this worker name that is gone (``STALE``: its
        liveness mark watched until it is decided, at most its TTL). One that another worker
        owns, that carries no owner mark, or that a live process of this worker's name uses
        is :class:`ProviderConflict` naming it, and none is touched."""
        from pyVmomi import vmodl

        s = self.settings
        by_name = {name: vm for vm, name in vms}

        def read() -> dict[str, Mark]:
            marks = {}
            for vm, name in vms:
                try:
                    props = read_props(si, vm, ["config.extraConfig", "runtime.powerState"])
                except vmodl.fault.ManagedObjectNotFound:
                    continue  # destroyed meanwhile (its owner's reset)
                marks[name] = mark_of(props.get("config.extraConfig"),
                                      str(props.get("runtime.powerState", "")))
            return marks

        decided = self._guarded(lambda: sort_out(
            read, owner=s.owner, instance=s.instance, ttl_s=s.alive_ttl_s,
            now=lambda: server_time(si)), "read the owner marks")
        refused = sorted((n, v, m) for n, (v, m) in decided.items() if v in REFUSED)
        if refused:
            now = self._guarded(lambda: server_time(si), "the time")
            raise ProviderConflict(conflict_message(
                option="clone_prefix", prefix=s.prefix, kind="VMs", owner=s.owner,
                instance=s.instance, found=refused, now=now,
                fix="give each worker process its own clone_prefix (its default, "
                    "coda-<worker name>, is its own) or CODA_WORKER_NAME (two workers on one "
                    "host share the default name, the host's), or stop that worker or remove "
                    "those VMs"))
        return [(by_name[n], n, v, m) for n, (v, m) in decided.items()]

    def _renew(self) -> None:
        """One round of the liveness marks of this process's clones (the renewer's thread);
        not connected: nothing to renew now."""
        si = self._si
        if si is None:
            return
        at = self._guarded(lambda: server_time(si), "the time")
        for d in list(self._desktops.values()):
            try:
                d.renew_alive(si, at)
            except DesktopBroken as exc:
                log.warning("vsphere.alive_failed", slot=d.slot, vm=d.vm_name,
                            detail=exc.detail)

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
        self._renewer.stop()
        super().close()
        with self._lock:
            si, self._si = self._si, None
        if si is not None:
            from pyVim.connect import Disconnect

            try:
                Disconnect(si)
            except (OSError, HTTPException) as exc:  # the server went first: no session left
                log.warning("vsphere.disconnect_failed", error=str(exc))
