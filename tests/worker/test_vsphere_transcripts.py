"""The vsphere provider's pyvmomi call sequences, checked against recorded transcripts of the
vSphere API's behaviour (no vCenter here: ``fakes/vsphere.py`` stands in for the service
instance). The address VMware Tools report leads to a real agent on a real display."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason, DesktopBroken
from worker.providers.local import LocalDesktop
from worker.providers.vsphere import VsphereProvider, VsphereSettings

from .fakes.vsphere import FakeServiceInstance

SCENARIOS = json.loads((Path(__file__).parent / "transcripts" / "vsphere_scenarios.json")
                       .read_text())["scenarios"]


def _provider(name: str, desktop: LocalDesktop, vm: str = "coda-slot-0",
              **kwargs: Any) -> tuple[VsphereProvider, FakeServiceInstance]:
    si = FakeServiceInstance(SCENARIOS[name])
    assert desktop.guest is not None
    port = urlsplit(desktop.guest.base_url).port
    assert port is not None
    settings = VsphereSettings(host="vcenter.example", user="coda", password=SecretStr("secret"),
                               vm_names=[vm], guest_port=port, guest_token=SecretStr(desktop.token),
                               ready_timeout_s=30, connect=lambda _: si, **kwargs)
    return VsphereProvider(settings), si


def test_lifecycle_matches_the_transcript(desktop: LocalDesktop) -> None:
    provider, si = _provider("lifecycle", desktop)
    d = provider.desktop(0)
    obs = d.reset()  # find by name, revert, power on, IPv4 from VMware Tools, ready
    assert (obs.width, obs.height) == (1280, 800)
    d.reset()
    si.vm.runtime.powerState = "poweredOff"  # someone powered it off on the host
    d.reset()
    assert d.replacements == 1 and d.last_broken is not None
    assert d.last_broken.reason is BrokenReason.VM_OFF
    provider.close()
    assert si.rec.calls == SCENARIOS["lifecycle"]["calls"]


def test_a_missing_snapshot_is_a_typed_start_failure(desktop: LocalDesktop) -> None:
    provider, si = _provider("no_snapshot", desktop, vm="dc1/vm/coda/coda-slot-0")
    with pytest.raises(DesktopBroken) as err:
        provider.desktop(0).reset()
    assert err.value.reason is BrokenReason.START_FAILED and "sci_bench" in err.value.detail
    provider.close()
    assert si.rec.calls == SCENARIOS["no_snapshot"]["calls"]


def test_a_task_fault_is_reported_with_its_message(desktop: LocalDesktop) -> None:
    provider, si = _provider("revert_fault", desktop)
    with pytest.raises(DesktopBroken) as err:
        provider.desktop(0).reset()
    assert err.value.reason is BrokenReason.START_FAILED
    assert "not allowed in the current state" in err.value.detail
    provider.close()
    assert si.rec.calls == SCENARIOS["revert_fault"]["calls"]


def test_no_vmware_tools_is_a_typed_no_guest_ip(desktop: LocalDesktop) -> None:
    provider, si = _provider("no_tools", desktop, ip_timeout_s=1.0)
    with pytest.raises(DesktopBroken) as err:
        provider.desktop(0).reset()
    assert err.value.reason is BrokenReason.NO_GUEST_IP
    provider.close()
    assert si.rec.calls == SCENARIOS["no_tools"]["calls"]
