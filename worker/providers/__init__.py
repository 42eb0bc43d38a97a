"""Desktop providers behind one reset / observe / act / close contract (``base``): ``local``
(Xvfb slots on this host), ``vmware`` (vmrun), ``vsphere`` (pyvmomi), ``docker`` (OSWorld's
QEMU image). ``conformance.check_desktop`` is the contract test every provider must pass."""

from worker.providers.base import Desktop, GuestLayout, Provider
from worker.providers.client import GuestClient, GuestError

__all__ = ["Desktop", "GuestClient", "GuestError", "GuestLayout", "Provider"]
