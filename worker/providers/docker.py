"""The ``docker`` provider, two modes through the Docker SDK:

* **desktop containers** (no ``qcow2``; image ``coda-desktop:latest`` of
  ``deploy/docker/Dockerfile.desktop``): per slot one container running Xvfb, the window manager,
  the slot applications and the project's guest agent with a token generated for the slot; reset
  closes the applications and restores the home inside the container (or recreates it). See
  :mod:`worker.providers.docker_desktop`; tested against a real engine (tests/worker/
  test_docker_provider.py).
* **OSWorld's QEMU-in-Docker** (``qcow2`` set; image ``happysixd/osworld-docker``): per slot one
  container running the VM disk (qcow2, mounted read-only at ``/System.qcow2``) with
  ``RAM_SIZE`` / ``CPU_CORES`` / ``DISK_SIZE``; ``/dev/kvm`` is passed through when this host has
  it (without it ``KVM=N`` and a warning: very slow). Its ports (5000 guest server, 8006 VNC,
  9222 Chrome, 8080 VLC, 8000 application APIs) are published on host ports Docker picks, read
  back from the container, so parallel slots never collide. Readiness: the shared probe on the
  guest server. Reset, as in OSWorld: remove the container and create a new one. Verified here
  only against a recorded Docker Engine API transcript (tests/worker/transcripts); it still
  needs KVM and OSWorld's image to be verified.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from coda.contracts.desktop import BrokenReason, DesktopBroken, Health, ProviderDown, ProviderFault
from worker.providers.base import Desktop, GuestLayout, Provider, log
from worker.providers.client import GuestClient
from worker.providers.docker_base import (
    ContainerSlot,
    DockerSettings,
    engine_down,
    engine_errors,
    unreachable,
)
from worker.providers.docker_desktop import (
    START_ERRORS,
    ContainerDesktop,
    image_missing,
    remove_stale,
)
from worker.providers.liveness import Renewer, check_alive
from worker.tokens import secret_value

GUEST_PORTS = {"server": 5000, "vnc": 8006, "chrome": 9222, "vlc": 8080, "apps": 8000}


def kvm_available(path: str = "/dev/kvm") -> bool:
    return os.path.exists(path) and os.access(path, os.R_OK | os.W_OK)


class DockerDesktop(ContainerSlot):
    """QEMU mode: OSWorld's image running the VM disk."""

    def _environment(self) -> tuple[dict[str, str], list[str]]:
        env = {"RAM_SIZE": self.s.ram, "CPU_CORES": str(self.s.cpus), "DISK_SIZE": self.s.disk}
        if kvm_available():
            return env, ["/dev/kvm:/dev/kvm:rwm"]
        log.warning("docker.no_kvm", slot=self.slot,
                    detail="/dev/kvm missing: QEMU runs without acceleration (very slow)")
        return {**env, "KVM": "N"}, []

    def _start(self) -> GuestClient:
        from docker.errors import ImageNotFound

        env, devices = self._environment()
        try:
            self._clear_name()
            assert self.s.qcow2 is not None
            self.client.images.get(self.s.image_name)  # pulled beforehand, or missing
            self.container = self.client.containers.run(
                self.s.image_name, name=self.name, detach=True, environment=env, devices=devices,
                cap_add=["NET_ADMIN"], labels=self.labels,
                volumes={str(self.s.qcow2.resolve()): {"bind": "/System.qcow2", "mode": "ro"}},
                ports={f"{p}/tcp": (self.s.bind_host, None) for p in GUEST_PORTS.values()})
            self.container.reload()
            self.ports = _published(self.container.attrs)
        except ImageNotFound as exc:
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               image_missing(self.s.image_name)) from exc
        except START_ERRORS + engine_errors() as exc:
            if unreachable(exc):
                raise engine_down(exc) from exc
            raise DesktopBroken(BrokenReason.START_FAILED, f"docker: {exc}") from exc
        log.info("docker.started", slot=self.slot, container=self.container.short_id,
                 ports=self.ports)
        host = self.s.bind_host
        self.layout = GuestLayout(portlike=GUEST_PORTS["apps"],
                                  app_url=f"http://{host}:{self.ports['apps']}")
        return GuestClient(f"http://{host}:{self.ports['server']}",
                           token=secret_value(self.s.guest_token))

    def _revert(self) -> GuestClient | None:
        self._stop()
        return self._start()

    def _stop(self) -> None:
        if self.container is None:
            return
        try:
            self.container.stop(timeout=10)
            self.container.remove(force=True)
        except engine_errors() as exc:  # already gone is fine; left behind: the next start
            log.warning("docker.stop_failed", slot=self.slot, detail=str(exc)[:300])
        self.container = None

    def _machine_health(self) -> Health:
        if self.container is None:
            return Health(ok=False, reason=BrokenReason.VM_OFF, detail="no container")
        try:
            self.container.reload()
        except engine_errors() as exc:
            reason = BrokenReason.NOT_ANSWERING if unreachable(exc) else BrokenReason.VM_OFF
            return Health(ok=False, reason=reason, detail=str(exc)[:300])
        if self.container.status != "running":
            return Health(ok=False, reason=BrokenReason.VM_OFF,
                          detail=f"container {self.container.status}")
        return Health(ok=True)


def _published(attrs: dict[str, Any]) -> dict[str, int]:
    """Host ports Docker picked for the guest ports, from the container's inspect data."""
    bound = attrs["NetworkSettings"]["Ports"]
    return {name: int(bound[f"{port}/tcp"][0]["HostPort"]) for name, port in GUEST_PORTS.items()}


class DockerProvider(Provider[Desktop]):
    """QEMU mode with ``qcow2``, desktop containers without."""

    name = "docker"

    def __init__(self, settings: DockerSettings) -> None:
        super().__init__()
        check_alive(settings.alive_interval_s, settings.alive_ttl_s)
        self.settings = settings
        self._client: Any = None
        self._cleaned = False
        self._lock = threading.RLock()
        self._renewer = Renewer("docker", settings.alive_interval_s, self._renew)

    def client(self) -> Any:
        """The engine's client, made at first use (then the containers an earlier run of this
        worker left are removed, once: never one a live process of its name uses); an engine
        that does not answer is ProviderDown."""
        with self._lock:
            if self._client is None:
                try:
                    self._client = self.settings.client()
                except engine_errors() as exc:
                    raise engine_down(exc) from exc
            if not self._cleaned and self.settings.qcow2 is None:
                try:
                    remove_stale(self._client, self.settings)
                except engine_errors() as exc:
                    raise engine_down(exc) from exc
                self._cleaned = True
            return self._client

    def probe(self) -> None:
        """The engine answers (a ping) and has the image; in QEMU mode the disk is there."""
        from docker.errors import ImageNotFound

        client = self.client()
        image = self.settings.image_name
        try:
            client.ping()
            client.images.get(image)
        except ImageNotFound as exc:
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               image_missing(image)) from exc
        except engine_errors() as exc:
            raise engine_down(exc) if unreachable(exc) else ProviderDown(
                ProviderFault.UNREACHABLE, BrokenReason.START_FAILED,
                f"the Docker engine: {str(exc)[:300]}") from exc
        qcow2 = self.settings.qcow2
        if qcow2 is not None and not qcow2.is_file():
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               f"provider_options.qcow2: {qcow2}: no such file")

    def _make(self, slot: int) -> Desktop:
        client = self.client()
        self._renewer.start()
        if self.settings.qcow2 is None:
            return ContainerDesktop(slot, self.settings, client)
        return DockerDesktop(slot, self.settings, client)

    def _renew(self) -> None:
        """One round of the liveness marks of this process's containers (the renewer's
        thread); a failure is logged per slot."""
        at = time.time()
        for d in list(self._desktops.values()):
            if isinstance(d, ContainerSlot):
                try:
                    d.renew_alive(at)
                except engine_errors() as exc:
                    log.warning("docker.alive_failed", slot=d.slot, detail=str(exc)[:300])

    def close(self) -> None:
        self._renewer.stop()
        super().close()
        if self._client is not None:
            self._client.close()
            self._client = None
