"""What the desktop side (the guest agent and the desktop session it runs in) and the driver
side (the providers that start desktops and hand them their token) agree on, so that neither
imports the other: how the agent's token is handed over, how long it must be, where a vSphere
VM carries it, and the mark on every process a desktop runs.

This module imports nothing of the project.
"""

from __future__ import annotations

TOKEN_ENV = "CODA_GUEST_TOKEN"
"""The variable that hands the agent its bearer token (never seen by the applications)."""
MIN_TOKEN_LENGTH = 16
"""The shortest token the agent and the desktop session accept."""
TOKEN_KEY = "coda.token"
"""The VM's ``guestinfo.<key>`` that carries the token (the ``vsphere`` provider sets it)."""
GUESTINFO_ENV_PREFIX = "VMX_GUESTINFO"
"""How VMware's simulator vcsim hands ``guestinfo.*`` to a container-backed VM."""
DESKTOP_MARK = "CODA_DESKTOP"
"""The variable every process a desktop's agent starts (and its children) carries, set to the
desktop's id: what closing its applications, or stopping a local slot, finds them by."""


def guestinfo_env_name(key: str) -> str:
    """``coda.token`` -> ``VMX_GUESTINFO_CODA_TOKEN`` (vcsim's name for it)."""
    return "VMX_" + f"guestinfo.{key}".upper().replace(".", "_")


def is_guestinfo_env(name: str) -> bool:
    """Whether an environment variable carries a guestinfo value (kept from applications)."""
    return name.startswith(GUESTINFO_ENV_PREFIX)
