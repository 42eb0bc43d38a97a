"""What both modes of the ``docker`` provider share (:mod:`worker.providers.docker`): its
options, a slot that is one container, its owner marks, and the engine's own failures typed as
the infrastructure's (:class:`~coda.contracts.desktop.ProviderDown`)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason, ProviderDown, ProviderFault
from worker.providers.base import Desktop, ProviderConflict, owner_slug


def _from_env() -> Any:
    import docker

    return docker.from_env()


QEMU_IMAGE = "happysixd/osworld-docker"
IMAGE_TAG_ENV = "CODA_IMAGE_TAG"


def project_image(name: str) -> str:
    """The project's image ``coda-<name>`` at the tag ``scripts/docker-build.sh`` gives it:
    ``$CODA_IMAGE_TAG``, ``latest`` by default (two checkouts on one engine each set their
    own, so neither runs the other's images)."""
    return f"coda-{name}:{os.environ.get(IMAGE_TAG_ENV) or 'latest'}"


@dataclass
class DockerSettings:
    """Options of the docker provider (``provider_options``). Without ``qcow2``: desktop
    containers of ``image`` (default ``coda-desktop:$CODA_IMAGE_TAG``, ``latest`` when unset);
    with it: OSWorld's QEMU image."""

    qcow2: Path | None = None  # the VM disk (QEMU mode): OSWorld's Ubuntu.qcow2, ScienceBoard's
    image: str | None = None  # default: coda-desktop:$CODA_IMAGE_TAG (latest), or OSWorld's (qcow2)
    ram: str = "4G"  # QEMU mode: the VM's memory
    cpus: int = 4  # QEMU mode: the VM's cores
    disk: str = "32G"  # QEMU mode
    bind_host: str = "127.0.0.1"  # where published ports listen (the host's loopback)
    name_prefix: str | None = None  # containers are <prefix>-<slot> (coda-desktop-<owner>)
    owner: str = field(default_factory=socket.gethostname)  # the worker's name: its
    # containers carry it (label coda.desktop.owner); its clean-up removes only those
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
    def prefix(self) -> str:
        """The containers' name prefix: ``name_prefix``, else the worker's own."""
        return self.name_prefix or f"coda-desktop-{owner_slug(self.owner)}"

    @property
    def image_name(self) -> str:
        return self.image or (QEMU_IMAGE if self.qcow2 is not None
                              else project_image("desktop"))


PREFIX_LABEL = "coda.desktop.prefix"
OWNER_LABEL = "coda.desktop.owner"


def engine_errors() -> tuple[type[Exception], ...]:
    """What the Docker SDK raises when the engine fails: its own errors, and requests' for an
    engine that does not answer (a socket nobody listens on, a daemon restarting)."""
    from docker.errors import DockerException
    from requests.exceptions import ConnectionError as NoAnswer

    return DockerException, NoAnswer


def unreachable(exc: BaseException) -> bool:
    """Whether the engine did not answer at all (as opposed to refusing a request)."""
    from docker.errors import DockerException
    from requests.exceptions import ConnectionError as NoAnswer

    return isinstance(exc, NoAnswer) or (isinstance(exc, DockerException)
                                         and "Error while fetching server API" in str(exc))


def engine_down(exc: BaseException) -> ProviderDown:
    return ProviderDown(ProviderFault.UNREACHABLE, BrokenReason.NOT_ANSWERING,
                        f"the Docker engine ({os.environ.get('DOCKER_HOST') or 'its socket'}) "
                        f"does not answer: {str(exc)[:300]}")


def owners(containers: list[Any]) -> list[tuple[str, str | None, str]]:
    """(name, owner label, status) of each container."""
    return [(c.name, (c.labels or {}).get(OWNER_LABEL), c.status) for c in containers]


def conflict_message(s: DockerSettings, found: list[tuple[str, str | None, str]]) -> str:
    named = sorted({o for _, o, _ in found if o})
    who = (f"worker {', '.join(repr(o) for o in named)}" if named
           else "containers without an owner label (an older CODA worker's or by hand)")
    listed = ", ".join(f"{n} ({o or 'no owner'}, {st})" for n, o, st in found[:10])
    return (f"desktop prefix {s.prefix!r} is in use by {who}: {listed}; this worker "
            f"({s.owner!r}) never removes containers it does not own: give it another "
            "name_prefix (its default, coda-desktop-<worker name>, is its own) or a distinct "
            "CODA_WORKER_NAME, or remove those containers")


class ContainerSlot(Desktop):
    """A slot that is one container named ``<prefix>-<slot>`` (both modes), labelled with its
    prefix and its owner (the worker)."""

    provider_name = "docker"

    def __init__(self, slot: int, settings: DockerSettings, client: Any) -> None:
        super().__init__(slot, ready_timeout_s=settings.ready_timeout_s)
        self.s = settings
        self.client = client
        self.name = f"{settings.prefix}-{slot}"
        self.container: Any = None
        self.ports: dict[str, int] = {}

    @property
    def labels(self) -> dict[str, str]:
        return {PREFIX_LABEL: self.s.prefix, OWNER_LABEL: self.s.owner, "coda.slot": str(self.slot)}

    def _clear_name(self) -> None:
        """Remove a container with this slot's name that this worker left; one of another
        worker is never touched (:class:`ProviderConflict`)."""
        from docker.errors import NotFound

        try:
            found = self.client.containers.get(self.name)
        except NotFound:
            return
        owner = (found.labels or {}).get(OWNER_LABEL)
        if owner != self.s.owner:
            raise ProviderConflict(conflict_message(self.s, [(self.name, owner, found.status)]))
        with contextlib.suppress(NotFound):
            found.remove(force=True)
