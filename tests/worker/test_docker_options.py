"""The docker provider's options as a worker passes them (JSON): the mode follows ``qcow2``,
the image defaults follow the mode, and unknown options are refused by name. No engine needed
(the Docker client is a stand-in that lists no containers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from worker.providers.docker import DockerDesktop, DockerProvider
from worker.providers.docker_base import project_image
from worker.providers.docker_desktop import PREFIX_LABEL, ContainerDesktop
from worker.providers.factory import ProviderConfigError, make_provider


class _Containers:
    def __init__(self) -> None:
        self.filters: list[dict[str, str]] = []

    def list(self, *, all: bool, filters: dict[str, str]) -> list[Any]:
        self.filters.append(filters)
        return []


class _Client:
    def __init__(self) -> None:
        self.containers = _Containers()

    def close(self) -> None:
        pass


def test_without_qcow2_the_slots_are_desktop_containers() -> None:
    client = _Client()
    p = make_provider("docker", {"reset": "recreate", "name_prefix": "w1", "screen": [1024, 768],
                                 "mem_limit": "2g"}, screen=(1280, 800))
    assert isinstance(p, DockerProvider)
    p.settings.client = lambda: client
    d = p.desktop(0)
    assert isinstance(d, ContainerDesktop) and d.name == "w1-0"
    assert p.settings.image_name == project_image("desktop")  # coda-desktop:$CODA_IMAGE_TAG
    assert tuple(p.settings.screen) == (1024, 768) and d.revert_restarts_guest
    assert client.containers.filters == [{"label": f"{PREFIX_LABEL}=w1"}]  # stale ones looked up
    p.close()


def test_the_default_image_follows_the_tag_docker_build_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODA_IMAGE_TAG", raising=False)
    assert project_image("desktop") == "coda-desktop:latest"
    monkeypatch.setenv("CODA_IMAGE_TAG", "mine")
    p = make_provider("docker", {})
    assert isinstance(p, DockerProvider) and p.settings.image_name == "coda-desktop:mine"


def test_desktop_names_are_the_workers_own_by_default() -> None:
    client = _Client()
    p = make_provider("docker", {}, owner="vm server/2")
    assert isinstance(p, DockerProvider)
    p.settings.client = lambda: client
    d = p.desktop(1)
    assert isinstance(d, ContainerDesktop) and d.name == "coda-desktop-vm-server-2-1"
    assert d.labels["coda.desktop.owner"] == "vm server/2"
    p.close()


def test_the_worker_screen_is_the_default_and_revert_the_reset() -> None:
    p = make_provider("docker", {}, screen=(1920, 1080))
    assert isinstance(p, DockerProvider)
    assert p.settings.screen == (1920, 1080) and p.settings.reset == "revert"


def test_with_qcow2_the_slots_run_osworlds_qemu_image(tmp_path: Path) -> None:
    p = make_provider("docker", {"qcow2": str(tmp_path / "Ubuntu.qcow2")})
    assert isinstance(p, DockerProvider)
    p.settings.client = _Client
    assert isinstance(p.desktop(0), DockerDesktop)
    assert p.settings.image_name == "happysixd/osworld-docker"


def test_unknown_options_are_refused_by_name() -> None:
    with pytest.raises(ProviderConfigError, match=r"provider_options\.memory"):
        make_provider("docker", {"memory": "2g"})
