"""The ``docker`` provider's desktop-container mode: per slot one container of the desktop slot
image (``deploy/docker/Dockerfile.desktop``, ``coda-desktop:latest``) running Xvfb, the window
manager and the project's guest agent (``worker.guest.session``) as a non-root user.

* Start: a container named ``<name_prefix>-<slot>`` with a token generated for the slot
  (``CODA_GUEST_TOKEN``) and the screen size (``CODA_DESKTOP_SCREEN``); the agent's port (5000)
  and ScienceBoard's application port (8000) are published on free ports of the host's loopback
  (``bind_host``), read back from the container. Readiness: the shared probe (agent answers,
  display up, screenshot not blank); while it waits, a container that exited ends the wait with
  its typed reason.
* Reset (``reset="revert"``, the default): the agent closes every application it started, the
  provider waits until no window is left, then the agent (``POST /coda/restore``; an older
  image without it: ``coda-desktop-restore`` as root through ``docker exec``) makes the home a
  fresh copy of the image's template and empties what the desktop user left in ``/tmp``,
  ``/var/tmp`` and ``/dev/shm``: the container, display and agent stay.
  ``reset="recreate"``: remove the container and run a new one from the image (everything
  fresh, slower: see ``benchmarks/results/env.json``).
* Health: the container's state first: a session that exited says which process died (exit
  code 3/4 ``x_crashed``, 5 ``agent_gone``: :data:`coda.contracts.desktop.SESSION_EXIT_REASONS`);
  killed, out of memory or gone is ``vm_off``. Then the agent's own health.
* Close removes the container. At the provider's first desktop (or probe), containers an
  earlier run of this worker left with its prefix are removed: those labelled
  ``coda.desktop.prefix=<prefix>`` and ``coda.desktop.owner=<this worker's name>`` by a worker
  process that is gone (its liveness mark stale: :mod:`worker.providers.liveness`). A container
  of the prefix that another worker owns, or that a live process of this worker's name uses,
  is never removed: the worker refuses to go on, naming it
  (:class:`~worker.providers.base.ProviderConflict`). The default prefix,
  ``coda-desktop-<worker name>``, is the worker's own.
* The engine's failures are the infrastructure's (:class:`~coda.contracts.desktop.ProviderDown`):
  an engine that does not answer, an image that is not there.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any

from coda.contracts.desktop import (
    SESSION_EXIT_REASONS,
    BrokenReason,
    DesktopBroken,
    Health,
    ProviderDown,
    ProviderFault,
)
from coda.guestenv import TOKEN_ENV
from worker.providers.base import GuestLayout, log
from worker.providers.client import GuestClient, GuestError
from worker.providers.docker_base import (
    INSTANCE_LABEL,
    PREFIX_LABEL,
    ContainerSlot,
    DockerSettings,
    claim,
    engine_down,
    engine_errors,
    unreachable,
)
from worker.providers.image import SCIENCEBOARD_IMAGE
from worker.providers.liveness import Verdict

AGENT_PORT = 5000
APPS_PORT = 8000
RESTORE = ["coda-desktop-restore"]
START_ERRORS: tuple[type[Exception], ...] = (KeyError, IndexError, TypeError, ValueError)
"""An answer of the engine that does not fit (its ports not published as asked)."""
__all__ = ["PREFIX_LABEL", "ContainerDesktop", "remove_stale"]


def remove_stale(client: Any, settings: DockerSettings) -> int:
    """Remove the containers an earlier run of this worker left with its prefix (labelled with
    the prefix and its name by a process that is gone: :func:`~worker.providers.docker_base.
    claim`); how many. Containers of the prefix that are not its own, or that a live process
    of its name uses, are never removed: :class:`~worker.providers.base.ProviderConflict`
    names them."""
    from docker.errors import NotFound

    found = client.containers.list(all=True,
                                   filters={"label": f"{PREFIX_LABEL}={settings.prefix}"})
    stale = [c for c, v in claim(client, settings, sorted(c.name for c in found))
             if v is Verdict.STALE]
    for c in stale:
        with contextlib.suppress(NotFound):
            c.remove(force=True)
    if stale:
        log.warning("docker.stale_removed", prefix=settings.prefix,
                    containers=[c.name for c in stale],
                    instances=sorted({str((c.labels or {}).get(INSTANCE_LABEL)) for c in stale}))
    return len(stale)


def image_missing(image: str) -> str:
    return (f"image {image} not found: build it with `bash scripts/docker-build.sh desktop` "
            "(CODA_IMAGE_TAG names its tag)")


class ContainerDesktop(ContainerSlot):
    """One slot: one container of the desktop slot image."""

    def __init__(self, slot: int, settings: DockerSettings, client: Any) -> None:
        super().__init__(slot, settings, client)
        self.token = ""
        self.revert_restarts_guest = settings.reset == "recreate"
        self.home = "/home/user"

    # hooks -------------------------------------------------------------------------------

    def _start(self) -> GuestClient:
        from docker.errors import ImageNotFound

        w, h = self.s.screen
        self.token = secrets.token_urlsafe(24)
        image = self.s.image_name
        try:
            self._clear_name()
            self.client.images.get(image)  # not there: missing (run would try a registry)
            self.container = self.client.containers.run(
                image, name=self.name, detach=True,
                environment={TOKEN_ENV: self.token, "CODA_DESKTOP_SCREEN": f"{w}x{h}",
                             "CODA_DESKTOP_ID": self.name},
                labels=self.labels,
                ports={f"{AGENT_PORT}/tcp": (self.s.bind_host, None),
                       f"{APPS_PORT}/tcp": (self.s.bind_host, None)},
                # the image's HEALTHCHECK is for a container run by hand: here the provider
                # probes the agent itself, and the engine's exec every 10 s cost ~0.01 cores a
                # container (8 idle desktops: 0.10 cores with it, 0.03 without)
                healthcheck=None if self.s.image_healthcheck else {"test": ["NONE"]},
                network=self.s.network, mem_limit=self.s.mem_limit, shm_size=self.s.shm_size,
                nano_cpus=int(self.s.cpu_limit * 1e9) if self.s.cpu_limit else None,
                cgroup_parent=(self.s.cgroup_parent.format(slot=self.slot)
                               if self.s.cgroup_parent else None))
            self.container.reload()
            bound = self.container.attrs["NetworkSettings"]["Ports"]
            self.ports = {name: int(bound[f"{port}/tcp"][0]["HostPort"])
                          for name, port in (("agent", AGENT_PORT), ("apps", APPS_PORT))}
        except ImageNotFound as exc:
            self._stop()
            raise ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                               image_missing(image)) from exc
        except START_ERRORS + engine_errors() as exc:
            self._stop()
            if unreachable(exc):
                raise engine_down(exc) from exc
            raise DesktopBroken(BrokenReason.START_FAILED, f"docker: {exc}") from exc
        log.info("docker.started", slot=self.slot, container=self.container.short_id,
                 image=image, ports=self.ports)
        host = self.s.bind_host
        self.layout = GuestLayout(portlike=APPS_PORT, app_url=f"http://{host}:{self.ports['apps']}",
                                  rewrites=list(SCIENCEBOARD_IMAGE.command_rewrites))
        return GuestClient(f"http://{host}:{self.ports['agent']}", token=self.token)

    def _revert(self) -> GuestClient | None:
        if self.s.reset == "recreate":
            self._stop()
            return self._start()
        guest = self._guest()
        guest.close_apps()
        deadline = time.monotonic() + self.s.close_timeout_s
        while guest.windows():
            if time.monotonic() > deadline:
                raise DesktopBroken(BrokenReason.NOT_ANSWERING,
                                    "windows survived closing the apps")
            time.sleep(0.02)
        self._restore(guest)
        return None

    def _restore(self, guest: GuestClient) -> None:
        """The home restored by the agent, as the desktop user (a ``docker exec`` costs the
        engine ~0.06 CPU-seconds a reset); by ``docker exec`` as root where the agent has no
        home template configured (503) or predates the route (404): an older image."""
        try:
            guest.restore()
        except GuestError as exc:
            if exc.status not in (404, 503):
                raise DesktopBroken(BrokenReason.START_FAILED, f"restore: {exc}") from exc
            self._exec_root(RESTORE)

    def _exec_root(self, argv: list[str]) -> None:
        try:
            code, out = self.container.exec_run(argv, user="root")
        except engine_errors() as exc:
            if unreachable(exc):
                raise engine_down(exc) from exc
            raise DesktopBroken(BrokenReason.VM_OFF, f"docker exec: {exc}") from exc
        if code != 0:
            text = out.decode(errors="replace")[-300:] if isinstance(out, bytes) else str(out)
            raise DesktopBroken(BrokenReason.START_FAILED,
                                f"{' '.join(argv)} exited {code}: {text}")

    def _stop(self) -> None:
        """Remove the container; one the engine could not remove (it does not answer) is
        removed by name at the slot's next start (:meth:`_clear_name`)."""
        from docker.errors import NotFound

        container, self.container = self.container, None
        if container is None:
            return
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except engine_errors() as exc:
            log.warning("docker.stop_failed", slot=self.slot, detail=str(exc)[:300])

    def _machine_health(self) -> Health:
        from docker.errors import NotFound

        if self.container is None:
            return Health(ok=False, reason=BrokenReason.VM_OFF, detail="no container")
        try:
            self.container.reload()
        except NotFound:
            return Health(ok=False, reason=BrokenReason.VM_OFF,
                          detail=f"container {self.name} is gone")
        except engine_errors() as exc:
            reason = BrokenReason.NOT_ANSWERING if unreachable(exc) else BrokenReason.VM_OFF
            return Health(ok=False, reason=reason, detail=str(exc)[:300])
        if self.container.status == "running":
            return Health(ok=True)
        state = self.container.attrs.get("State", {})
        code = int(state.get("ExitCode", -1))
        reason = SESSION_EXIT_REASONS.get(code, BrokenReason.VM_OFF)
        detail = (f"container {self.container.status} (exit {code}"
                  f"{', out of memory' if state.get('OOMKilled') else ''}): {self._log_tail()}")
        return Health(ok=False, reason=reason, detail=detail)

    def _down(self) -> Health | None:
        h = self._machine_health()
        return None if h.ok else h

    def _log_tail(self, lines: int = 5) -> str:
        try:
            out = self.container.logs(tail=lines)
        except engine_errors():
            return ""
        return " | ".join(out.decode(errors="replace").strip().splitlines())[-600:]
