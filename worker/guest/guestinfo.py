"""A VMware VM's ``guestinfo`` variables, read from inside the guest.

The ``vsphere`` provider hands each desktop its token as the VM's ``guestinfo.coda.token``
(extraConfig, set through the vSphere API): it never appears on a command line or in a log of
the worker or the guest. Inside the guest it is read two ways:

* VMware Tools' RPC: ``vmware-rpctool "info-get guestinfo.<key>"`` (open-vm-tools), on a real
  ESXi / vCenter VM; the value comes back on its standard output;
* the environment variable ``VMX_GUESTINFO_<KEY>`` (upper case, dots as underscores), which is
  how VMware's simulator vcsim hands ``guestinfo.*`` to a container-backed VM (its stand-in for
  the Tools RPC).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

from coda.guestenv import guestinfo_env_name
from coda.logging import get_logger

log = get_logger("guest.guestinfo")

RPCTOOL = "vmware-rpctool"


def read_guestinfo(key: str, env: Mapping[str, str] | None = None, *,
                   timeout_s: float = 5.0) -> str | None:
    """``guestinfo.<key>`` of this VM, or None when it is unset or there is no way to ask."""
    value = (os.environ if env is None else env).get(guestinfo_env_name(key), "").strip()
    if value:
        return value
    tool = shutil.which(RPCTOOL)
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, f"info-get guestinfo.{key}"], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("guestinfo.unreadable", key=key, error=type(exc).__name__)
        return None
    value = done.stdout.strip()
    return value if done.returncode == 0 and value else None  # "No value found": exit 1
