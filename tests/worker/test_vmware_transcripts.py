"""The vmware provider's ``vmrun`` call sequences, checked against recorded transcripts of
vmrun's behaviour (no hypervisor here: ``fakes/vmrun.py`` replays them). The guest behind the
"VM" is a real agent on a real display, so readiness probing runs for real."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason, DesktopBroken, ProviderDown, ProviderFault
from worker.providers.local import LocalDesktop
from worker.providers.vmware import VmwareDesktop, VmwareProvider, VmwareSettings

HERE = Path(__file__).parent
FAKE_VMRUN = HERE / "fakes" / "vmrun.py"


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def vmware(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
           desktop: LocalDesktop) -> Any:
    """Settings and a transcript loader: ``use(name)`` makes the fake vmrun replay it."""
    template = tmp_path / "template" / "Ubuntu.vmx"
    template.parent.mkdir()
    template.write_text('config.version = "8"\n')
    clones = tmp_path / "clones"
    log = tmp_path / "vmrun.log"
    log.touch()
    values = {"TEMPLATE": str(template), "CLONE": str(clones / "coda-slot-0" / "coda-slot-0.vmx"),
              "CLONE0": str(clones / "coda-slot-0" / "coda-slot-0.vmx"),
              "CLONE1": str(clones / "coda-slot-1" / "coda-slot-1.vmx")}
    monkeypatch.setenv("CODA_FAKE_VMRUN_VARS", json.dumps(values))
    monkeypatch.setenv("CODA_FAKE_VMRUN_LOG", str(log))
    assert desktop.guest is not None
    port = urlsplit(desktop.guest.base_url).port
    assert port is not None
    settings = VmwareSettings(template_vmx=template, clones_dir=clones, vmrun=str(FAKE_VMRUN),
                              host_type="ws", guest_port=port, guest_token=SecretStr(desktop.token),
                              ip_timeout_s=10, ready_timeout_s=30)

    class Harness:
        def use(self, name: str) -> dict[str, Any]:
            monkeypatch.setenv("CODA_FAKE_VMRUN_TRANSCRIPT", str(HERE / "transcripts" / name))
            return dict(json.loads((HERE / "transcripts" / name).read_text()))

        @property
        def settings(self) -> VmwareSettings:
            return settings

        def calls(self) -> list[dict[str, Any]]:
            """Each call as it started (matched: its transcript index, None if unexpected)."""
            return [c for c in _log(log) if "finished" not in c]

        def finished(self) -> list[dict[str, Any]]:
            """Each call as it ended, with its start and end times."""
            return [c for c in _log(log) if "finished" in c]

    return Harness()


def _assert_replayed(harness: Any, transcript: dict[str, Any]) -> None:
    calls = harness.calls()
    unexpected = [c["argv"] for c in calls if c["matched"] is None]
    assert not unexpected, f"calls not in the transcript: {unexpected}"
    assert sorted(c["matched"] for c in calls) == list(range(len(transcript["calls"])))


def test_lifecycle_matches_the_transcript(vmware: Any) -> None:
    transcript = vmware.use("vmrun_lifecycle.json")
    provider = VmwareProvider(vmware.settings)
    d = provider.desktop(0)
    obs = d.reset()  # clone, clean snapshot, revert, start, address, readiness
    assert (obs.width, obs.height) == (1280, 800)
    d.reset()  # healthy: revert, start, address
    d.reset()  # vmrun list no longer shows it: replaced
    assert d.replacements == 1 and d.last_broken is not None
    assert d.last_broken.reason is BrokenReason.VM_OFF
    assert d.health().ok is False  # the transcript has no more 'list' answers
    provider.close()
    calls = [c for c in vmware.calls() if c["matched"] is not None]
    assert [c["argv"][2] for c in calls][:6] == [
        "listSnapshots", "clone", "snapshot", "revertToSnapshot", "start", "getGuestIPAddress"]
    unexpected = [c for c in vmware.calls() if c["matched"] is None]
    assert [c["argv"][2] for c in unexpected] == ["list"]  # the extra health probe above
    assert len(calls) == len(transcript["calls"])


def test_a_template_without_the_snapshot_is_a_typed_start_failure(vmware: Any) -> None:
    transcript = vmware.use("vmrun_no_snapshot.json")
    provider = VmwareProvider(vmware.settings)
    with pytest.raises(ProviderDown) as err:  # the infrastructure's: no episode is charged
        provider.desktop(0).reset()
    assert err.value.reason is BrokenReason.START_FAILED and "sci_bench" in err.value.detail
    assert err.value.fault is ProviderFault.MISSING
    provider.close()
    _assert_replayed(vmware, transcript)


def test_a_probe_names_what_is_missing(vmware: Any, tmp_path: Path) -> None:
    transcript = vmware.use("vmrun_probe_no_snapshot.json")
    with pytest.raises(ProviderDown) as err:
        VmwareProvider(vmware.settings).probe()
    assert err.value.fault is ProviderFault.MISSING
    assert err.value.detail == f"{vmware.settings.template_vmx} has no snapshot 'sci_bench'"
    _assert_replayed(vmware, transcript)
    gone = replace(vmware.settings, template_vmx=tmp_path / "gone" / "Ubuntu.vmx")
    with pytest.raises(ProviderDown) as err:
        VmwareProvider(gone).probe()  # vmrun answered; the template is not there
    assert err.value.detail.startswith("provider_options.template_vmx: ")
    no_vmrun = replace(vmware.settings, vmrun=str(tmp_path / "no-vmrun"))
    with pytest.raises(ProviderDown) as err:
        VmwareProvider(no_vmrun).probe()
    assert err.value.fault is ProviderFault.MISSING and "no-vmrun not found" in err.value.detail


def test_no_vmware_tools_is_a_typed_no_guest_ip(vmware: Any) -> None:
    transcript = vmware.use("vmrun_no_tools.json")
    provider = VmwareProvider(vmware.settings)
    with pytest.raises(DesktopBroken) as err:
        provider.desktop(0).reset()
    assert err.value.reason is BrokenReason.NO_GUEST_IP
    assert "VMware Tools are not running" in err.value.detail
    provider.close()
    _assert_replayed(vmware, transcript)


def test_parallel_slots_clone_under_a_lock(vmware: Any) -> None:
    transcript = vmware.use("vmrun_parallel_clones.json")
    desktops = [VmwareDesktop(slot, vmware.settings) for slot in (0, 1)]
    threads = [threading.Thread(target=d._ensure_clone) for d in desktops]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    _assert_replayed(vmware, transcript)
    clones = sorted((c for c in vmware.finished() if c["argv"][2] == "clone"),
                    key=lambda c: c["start"])
    assert len(clones) == 2
    assert clones[0]["end"] <= clones[1]["start"], "two clones ran at once"
    for d in desktops:
        assert d.vmx.exists()
