"""What both modes of the ``docker`` provider share (:mod:`worker.providers.docker`): its
options, and a slot that is one container."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from worker.providers.base import Desktop


def _from_env() -> Any:
    import docker

    return docker.from_env()


QEMU_IMAGE = "happysixd/osworld-docker"
DESKTOP_IMAGE = "coda-desktop:latest"


@dataclass
class DockerSettings:
    """Options of the docker provider (``provider_options``). Without ``qcow2``: desktop
    containers of ``image`` (default ``coda-desktop:latest``); with it: OSWorld's QEMU image."""

    qcow2: Path | None = None  # the VM disk (QEMU mode): OSWorld's Ubuntu.qcow2, ScienceBoard's
    image: str | None = None  # default: coda-desktop:latest, or happysixd/osworld-docker (qcow2)
    ram: str = "4G"  # QEMU mode: the VM's memory
    cpus: int = 4  # QEMU mode: the VM's cores
    disk: str = "32G"  # QEMU mode
    bind_host: str = "127.0.0.1"  # where published ports listen (the host's loopback)
    name_prefix: str = "coda-desktop"  # containers are <prefix>-<slot>; stale ones removed
    guest_token: SecretStr | None = None  # QEMU mode (desktop mode generates one per slot)
    ready_timeout_s: float = 300.0
    client: Callable[[], Any] = field(default=_from_env)  # a docker.DockerClient factory
    # desktop mode
    reset: Literal["revert", "recreate"] = "revert"  # close apps + restore home, or a new container
    screen: tuple[int, int] = (1280, 800)
    network: str | None = None  # a network to attach to (default: the engine's bridge)
    mem_limit: str | None = None  # a memory limit per container, e.g. "2g"
    cpu_limit: float | None = None  # a CPU limit per container, in cores
    # the container's parent cgroup ("{slot}" replaced by the slot): e.g. "/coda-desktop-{slot}"
    # gives each desktop its own CPU weight beside the host's processes (cgroup v1, cgroupfs)
    cgroup_parent: str | None = None
    # the image's HEALTHCHECK: an exec into the container every 10 s (~0.01 cores a desktop);
    # off by default, the provider probes the agent itself
    image_healthcheck: bool = False
    shm_size: str = "256m"  # /dev/shm (Chromium-based help views, Qt)
    close_timeout_s: float = 10.0  # revert: wait this long for the windows to close

    @property
    def image_name(self) -> str:
        return self.image or (QEMU_IMAGE if self.qcow2 is not None else DESKTOP_IMAGE)


class ContainerSlot(Desktop):
    """A slot that is one container named ``<name_prefix>-<slot>`` (both modes)."""

    provider_name = "docker"

    def __init__(self, slot: int, settings: DockerSettings, client: Any) -> None:
        super().__init__(slot, ready_timeout_s=settings.ready_timeout_s)
        self.s = settings
        self.client = client
        self.name = f"{settings.name_prefix}-{slot}"
        self.container: Any = None
        self.ports: dict[str, int] = {}
