"""What both modes of the ``docker`` provider share (:mod:`worker.providers.docker`): its
options, a slot that is one container, its owner marks (labels: the worker's name, its
process's instance, how long a liveness mark holds) and its liveness mark (a file in the
container that the owning process renews, :mod:`worker.providers.liveness`), and the engine's
own failures typed as the infrastructure's (:class:`~coda.contracts.desktop.ProviderDown`)."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from coda.contracts.desktop import BrokenReason, ProviderDown, ProviderFault
from worker.providers.base import Desktop, ProviderConflict, owner_slug
from worker.providers.liveness import (
    ALIVE_INTERVAL_S,
    ALIVE_TTL_S,
    REFUSED,
    Mark,
    Verdict,
    conflict_message,
    new_instance,
    parse_time,
    sort_out,
    stamp,
)


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
    instance: str = field(default_factory=new_instance)  # this worker process (its label)
    alive_interval_s: float = ALIVE_INTERVAL_S  # renew each container's liveness mark this often
    alive_ttl_s: float = ALIVE_TTL_S  # a liveness mark not renewed for this long is stale
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
OWNER_LABEL = "coda.desktop.owner"  # the worker's name
INSTANCE_LABEL = "coda.desktop.instance"  # the worker process's instance id
STARTED_LABEL = "coda.desktop.started"  # the container's start (unix s): its first liveness
ALIVE_TTL_LABEL = "coda.desktop.alive_ttl"  # how long a renewal of the liveness mark holds (s)
ALIVE_PATH = "/.coda-alive"  # the liveness mark: the time of its last renewal (unix s)


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


def read_alive(container: Any) -> float | None:
    """The container's liveness mark (:data:`ALIVE_PATH`), None when there is none."""
    from docker.errors import NotFound

    try:
        chunks, _ = container.get_archive(ALIVE_PATH)
    except NotFound:
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            data = tar.extractfile(member) if member is not None else None
            return parse_time(data.read().decode()) if data is not None else None
    except (tarfile.TarError, UnicodeDecodeError):
        return None


def write_alive(container: Any, at: float) -> None:
    """Renew the container's liveness mark: the time ``at`` in :data:`ALIVE_PATH` (a running
    or stopped container: the engine writes it, not a process inside)."""
    data = stamp(at).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(ALIVE_PATH.rsplit("/", 1)[1])
        info.size, info.mtime, info.mode = len(data), int(at), 0o644
        tar.addfile(info, io.BytesIO(data))
    container.put_archive(ALIVE_PATH.rsplit("/", 1)[0] or "/", buf.getvalue())


def mark_of(container: Any, owner: str) -> Mark:
    """A container's owner marks; its liveness mark is read only where it counts (this
    worker name's): the file, else the time of its start."""
    labels = container.labels or {}
    mark = Mark(owner=labels.get(OWNER_LABEL), instance=labels.get(INSTANCE_LABEL),
                state=str(container.status))
    if mark.owner != owner or mark.instance is None:
        return mark
    started = parse_time(labels.get(STARTED_LABEL, ""))
    alive = read_alive(container)
    return Mark(owner=mark.owner, instance=mark.instance, state=mark.state,
                alive=max(a for a in (alive, started, 0.0) if a is not None),
                ttl=parse_time(labels.get(ALIVE_TTL_LABEL, "")))


def claim(client: Any, s: DockerSettings, names: list[str]) -> list[tuple[Any, Verdict]]:
    """The verdicts on the containers with these names (this provider's slot names), by their
    owner marks: this process's (``MINE``) or a process's of this worker name that is gone
    (``STALE``: its liveness mark watched until it is decided, at most its TTL); a container
    gone meanwhile is left out. One that another worker owns, that carries no owner label, or
    that a live process of this worker's name uses is :class:`ProviderConflict` naming it,
    and none is touched."""
    from docker.errors import NotFound

    found: dict[str, Any] = {}

    def read() -> dict[str, Mark]:
        marks = {}
        for name in names:
            try:
                found[name] = c = client.containers.get(name)
            except NotFound:
                continue
            marks[name] = mark_of(c, s.owner)
        return marks

    decided = sort_out(read, owner=s.owner, instance=s.instance, ttl_s=s.alive_ttl_s,
                       now=time.time)
    refused = sorted((n, v, m) for n, (v, m) in decided.items() if v in REFUSED)
    if refused:
        raise ProviderConflict(conflict_message(
            option="name_prefix", prefix=s.prefix, kind="containers", owner=s.owner,
            instance=s.instance, found=refused, now=time.time(),
            fix="give each worker process its own name_prefix (its default, "
                "coda-desktop-<worker name>, is its own) or CODA_WORKER_NAME (two workers on "
                "one host share the default name, the host's), or stop that worker or remove "
                "those containers"))
    return [(found[n], v) for n, (v, _) in decided.items()]


class ContainerSlot(Desktop):
    """A slot that is one container named ``<prefix>-<slot>`` (both modes), labelled with its
    prefix and its owner (the worker's name and its process's instance), its liveness mark
    renewed while the process lives (:meth:`renew_alive`)."""

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
        """The labels of a container started now."""
        return {PREFIX_LABEL: self.s.prefix, OWNER_LABEL: self.s.owner,
                INSTANCE_LABEL: self.s.instance, STARTED_LABEL: stamp(time.time()),
                ALIVE_TTL_LABEL: stamp(self.s.alive_ttl_s), "coda.slot": str(self.slot)}

    def _clear_name(self) -> None:
        """Remove a container with this slot's name that this process or a process of this
        worker's name that is gone left; one of another worker, or of a live process of this
        worker's name, is never touched (:class:`ProviderConflict`)."""
        from docker.errors import NotFound

        for found, _ in claim(self.client, self.s, [self.name]):
            with contextlib.suppress(NotFound):
                found.remove(force=True)

    def renew_alive(self, at: float) -> None:
        """Renew this container's liveness mark (one gone meanwhile: nothing to renew)."""
        from docker.errors import NotFound

        container = self.container
        if container is not None:
            with contextlib.suppress(NotFound):
                write_alive(container, at)
