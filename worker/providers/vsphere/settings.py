"""The ``vsphere`` provider's options (``provider_options``; docs/vsphere.md, "Settings")."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import SecretStr

from worker.providers.base import owner_slug
from worker.providers.liveness import ALIVE_INTERVAL_S, ALIVE_TTL_S, new_instance


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
    instance: str = field(default_factory=new_instance)  # this worker process (coda.instance)
    alive_interval_s: float = ALIVE_INTERVAL_S  # renew each clone's coda.alive this often
    alive_ttl_s: float = ALIVE_TTL_S  # a coda.alive not renewed for this long is stale
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
