"""The ``vsphere`` provider: desktops that are VMs of a vCenter / ESXi, through pyvmomi
(docs/vsphere.md): its options (:mod:`.settings`), a small pyVmomi library (:mod:`.api`), a
desktop with its two modes, clone and revert (:mod:`.desktop`), and the provider with the
template's resolution (:mod:`.provider`). The names others use are re-exported here."""

from worker.providers.vsphere.api import (
    fault_text,
    find_vm,
    list_vms,
    owner_of,
    task_result,
    usable_ipv4,
    wait_task,
)
from worker.providers.vsphere.desktop import VsphereDesktop
from worker.providers.vsphere.provider import VsphereProvider
from worker.providers.vsphere.settings import VsphereSettings

__all__ = ["VsphereDesktop", "VsphereProvider", "VsphereSettings", "fault_text", "find_vm",
           "list_vms", "owner_of", "task_result", "usable_ipv4", "wait_task"]
