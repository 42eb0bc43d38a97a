"""The docker provider through the real Docker SDK, checked against a recorded Docker Engine
API transcript (no engine here: ``fakes/docker_engine.py`` replays it over HTTP). The published
guest port leads to a real agent on a real display, so readiness probing runs for real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import docker
from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason
from worker.providers.docker import DockerDesktop, DockerProvider, DockerSettings, kvm_available
from worker.providers.local import LocalDesktop

from .fakes.docker_engine import ReplayEngine

TRANSCRIPT = Path(__file__).parent / "transcripts" / "docker_engine_lifecycle.json"


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _calls(doc: dict[str, Any]) -> list[dict[str, Any]]:
    variant = doc["kvm"] if kvm_available() else doc["no_kvm"]
    return [_merge(c, {"body": variant}) if c.get("create") else c for c in doc["calls"]]


def test_docker_lifecycle_matches_the_transcript(tmp_path: Path, desktop: LocalDesktop) -> None:
    doc = json.loads(TRANSCRIPT.read_text())
    qcow2 = tmp_path / "Ubuntu.qcow2"
    qcow2.write_bytes(b"QFI\xfb")
    assert desktop.guest is not None
    port = urlsplit(desktop.guest.base_url).port
    engine = ReplayEngine(_calls(doc), {"GUEST_PORT": str(port),
                                        "QCOW2": str(qcow2.resolve())}).start()
    try:
        provider = DockerProvider(DockerSettings(
            qcow2=qcow2, guest_token=SecretStr(desktop.token), ready_timeout_s=30,
            name_prefix="coda-desktop", owner="recorded-worker",
            alive_interval_s=3600, alive_ttl_s=7200,  # no liveness renewal in the transcript
            client=lambda: docker.DockerClient(base_url=engine.url)))
        d = provider.desktop(0)
        assert isinstance(d, DockerDesktop)
        obs = d.reset()  # stale container removed, created, started, published ports, ready
        assert (obs.width, obs.height) == (1280, 800)
        assert d.ports["vnc"] == 32801 and d.layout.app_url.endswith(":32804")
        assert d.layout.rewrite("kalgebra «PORTLIKE»") == "kalgebra 8000"
        d.reset()  # OSWorld's reset: remove and recreate
        d.reset()  # the container exited: reported and replaced
        assert d.replacements == 1 and d.last_broken is not None
        assert d.last_broken.reason is BrokenReason.VM_OFF
        provider.close()
    finally:
        engine.stop()
    assert engine.mismatches == []
    assert engine.index == len(doc["calls"]), "every recorded call was made"
