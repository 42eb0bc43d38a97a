"""The vsphere provider's pure parts: the options each mode needs, which address counts, the
bound on a vSphere task (cancelled past it). Its behaviour against a vSphere API is tested on
VMware's simulator (test_vsphere_provider.py)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason, DesktopBroken
from worker.providers.factory import ProviderConfigError, make_provider
from worker.providers.vsphere import VsphereSettings, fault_text, usable_ipv4, wait_task


def test_a_task_past_its_bound_is_cancelled_and_typed() -> None:
    now = [0.0]
    cancelled = []

    def sleep(s: float) -> None:
        now[0] += s

    with pytest.raises(DesktopBroken) as err:
        wait_task(lambda: {"info.state": "running"}, 1.0, "clone coda-clone-0",
                  cancel=lambda: cancelled.append(True), clock=lambda: now[0], sleep=sleep)
    assert err.value.reason is BrokenReason.NOT_ANSWERING and "still running" in err.value.detail
    assert cancelled == [True]


def test_settings_name_what_a_mode_needs() -> None:
    base = {"host": "vc", "user": "u", "password": "p"}
    with pytest.raises(ProviderConfigError, match=r"provider_options\.template"):
        make_provider("vsphere", base)
    with pytest.raises(ProviderConfigError, match=r"provider_options\.vm_names"):
        make_provider("vsphere", {**base, "mode": "revert"})
    s = VsphereSettings(host="vc", user="u", password=SecretStr("p"), template="t")
    assert "p" not in repr(s.password) and s.mode == "clone" and s.tools_required


@pytest.mark.parametrize(("value", "ip"), [
    ("172.17.0.4", "172.17.0.4"), ("fe80::250:56ff:fe9a:1", None), ("169.254.3.1", None),
    ("0.0.0.0", None), (None, None), ("", None), ("10.0.0.7", "10.0.0.7")])
def test_only_a_reachable_ipv4_address_counts(value: object, ip: str | None) -> None:
    assert usable_ipv4(value) == ip


def test_a_task_error_names_the_fault_and_its_message() -> None:
    class InvalidPowerState(Exception):
        msg = "The attempted operation cannot be performed in the current state (Powered off)."

    class Error:
        fault = InvalidPowerState()
        localizedMessage = ""

    with pytest.raises(DesktopBroken) as err:
        wait_task(lambda: {"info.state": "error", "info.error": Error()}, 5, "power off vm-1")
    assert err.value.reason is BrokenReason.START_FAILED
    assert err.value.detail == ("power off vm-1: InvalidPowerState: The attempted operation "
                                "cannot be performed in the current state (Powered off).")
    assert fault_text({}) == "fault: None"
