"""VMware's vSphere simulator (vcsim) with VMs that are desktops: for developers (``coda vcsim
serve``), the vsphere provider's tests and the benchmarks.

:class:`Vcsim` runs the project's vcsim binary (``deploy/vcsim/main.go``, built by
``scripts/vcsim.sh`` from Debian's govmomi sources) on a free loopback port over https with a
self-signed certificate made at its start (written to a PEM file the provider trusts through
``ca_file``), with credentials of its own passed through the environment. Stopping it removes
the containers of the VMs it still has.

A VM of the simulator runs a container when its extraConfig has ``RUN.container``
(:func:`desktop_run`: the desktop image, ``--tmpfs /sys:rw`` because vcsim mounts a volume at
``/sys/class/dmi/id``, which a read-only sysfs refuses, and ``CODA_DESKTOP_HOME_TEMPLATE`` so
the desktop restores its home at every boot: a snapshot revert in vcsim leaves the container's
files as they are). :func:`create_vm` makes such a VM (optionally with a snapshot, optionally
marked as a template) in the simulator's datacenter DC0 on host DC0_H0.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from coda.logging import get_logger
from coda.procs import log_tail, start_ready, stop_process

log = get_logger("coda.vcsim")
ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "scripts" / "vcsim.sh"
HOME_TEMPLATE = "/opt/coda/home"  # the desktop image's home template
TAR_IMAGE = "coda-base/debian:bookworm"  # has tar, built from Debian's packages
START_TIMEOUT_S = 60.0


class VcsimError(RuntimeError):
    """The simulator could not be built or started (the message says what to do)."""


def vcsim_binary() -> Path:
    """``$CODA_VCSIM``, else what ``scripts/vcsim.sh`` builds (when missing) and prints."""
    given = os.environ.get("CODA_VCSIM")
    if given:
        if not os.access(given, os.X_OK):
            raise VcsimError(f"CODA_VCSIM={given} is not an executable file")
        return Path(given)
    if not BUILD_SCRIPT.exists():
        raise VcsimError(f"{BUILD_SCRIPT} is missing: set CODA_VCSIM to a vcsim binary")
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True,
                          check=False)  # its progress goes to stderr
    if done.returncode != 0 or not done.stdout.strip():
        raise VcsimError(f"bash scripts/vcsim.sh failed ({done.returncode}): see its output")
    return Path(done.stdout.strip().splitlines()[-1])


@dataclass
class Vcsim:
    """One simulator process; :meth:`start`, then :meth:`stop` (or use :func:`running`)."""

    binary: Path
    workdir: Path
    user: str = "coda"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(16), repr=False)
    tar_image: str = TAR_IMAGE
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    listen_port: int = 0
    """The port to serve on (0: a free one); a simulator started again after a crash takes the
    port of the one before, as a vCenter that comes back does."""
    network: str = field(default_factory=lambda: f"coda-vcsim-{secrets.token_hex(4)}")
    """A Docker network of this simulator's own for its VMs' containers: vcsim reads a
    container's address at its first start only, and a container restarted (a VM powered off
    and on) gets its old address back on a network where no one else's take it."""

    @property
    def cert(self) -> Path:
        return self.workdir / "vcsim-cert.pem"

    @property
    def log_path(self) -> Path:
        return self.workdir / "vcsim.log"

    @property
    def password_file(self) -> Path:
        return self.workdir / "vcsim-password"

    def change_password(self, password: str) -> None:
        """Change the simulator's password while it runs (SIGHUP re-reads it): sessions open
        stay, the next login needs the new one (as a vCenter's password rotation)."""
        assert self.proc is not None, "not running"
        self._write_password(password)
        self.proc.send_signal(signal.SIGHUP)
        self.password = password

    def _write_password(self, password: str) -> None:
        tmp = self.password_file.with_suffix(".tmp")
        tmp.write_text(password)
        tmp.chmod(0o600)
        tmp.replace(self.password_file)

    @property
    def host(self) -> str:
        return self.url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])

    def start(self) -> None:
        ready = self.workdir / "vcsim-ready.json"
        ready.unlink(missing_ok=True)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_password(self.password)
        _docker("network", "create", "--label", "coda.vcsim=1", self.network)
        try:
            self.proc = start_ready(
                [str(self.binary), "-listen", f"127.0.0.1:{self.listen_port}", "-cert",
                 str(self.cert), "-ready", str(ready), "-tar-image", self.tar_image],
                ready.exists, name="vcsim", log=self.log_path, timeout=START_TIMEOUT_S,
                env={"VCSIM_USERNAME": self.user,
                     "VCSIM_PASSWORD_FILE": str(self.password_file)})
        except BaseException:
            _docker("network", "rm", self.network)
            raise
        self.url = str(json.loads(ready.read_text())["url"])
        log.info("vcsim.started", url=self.url, pid=self.proc.pid)

    def stop(self) -> int | None:
        """SIGTERM (it removes its VMs' containers), bounded; its exit code."""
        if self.proc is None:
            return None
        stop_process(self.proc, timeout=120, sig=signal.SIGTERM)
        code = self.proc.returncode
        self.proc = None
        _docker("network", "rm", self.network)  # its VMs' containers went with it
        log.info("vcsim.stopped", code=code)
        return code

    def kill(self) -> list[str]:
        """SIGKILL, as a crash: nothing of its own clean-up runs. What it left (its VMs'
        containers, and volumes of the same names, on its network) is removed here, as an
        operator would; their names."""
        if self.proc is None:
            return []
        self.proc.kill()
        self.proc.wait(30)
        self.proc = None
        found = subprocess.run(["docker", "ps", "-a", "--filter", f"network={self.network}",
                                "--format", "{{.Names}}"], capture_output=True, text=True,
                               check=False).stdout.split()
        for name in found:
            subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, check=False)
            subprocess.run(["docker", "volume", "rm", "-f", name], capture_output=True,
                           check=False)
        _docker("network", "rm", self.network)
        log.info("vcsim.killed", left=found)
        return found

    def log(self) -> str:
        return log_tail(self.log_path, 6000)

    def options(self, **extra: Any) -> dict[str, Any]:
        """vsphere provider options for this simulator (JSON-able): its address, credentials
        and certificate; no VMware Tools to wait for; VMs of the project's desktop image."""
        return {"host": self.host, "port": self.port, "user": self.user,
                "password": self.password, "ca_file": str(self.cert), "tools_required": False,
                "debian_apps": True, **extra}

    def connect(self) -> Any:
        """A pyvmomi service instance (certificate checked against the simulator's)."""
        from pyVim.connect import SmartConnect

        return SmartConnect(host=self.host, port=self.port, user=self.user, pwd=self.password,
                            sslContext=ssl.create_default_context(cafile=str(self.cert)))


def _docker(*args: str) -> None:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise VcsimError(f"docker {' '.join(args)}: {done.stderr.strip()}")


@contextmanager
def running(workdir: Path | None = None, binary: Path | None = None) -> Iterator[Vcsim]:
    """A started simulator, stopped afterwards (its temporary folder removed)."""
    own = workdir is None
    folder = Path(tempfile.mkdtemp(prefix="coda-vcsim-")) if workdir is None else workdir
    sim = Vcsim(binary=binary or vcsim_binary(), workdir=folder)
    try:
        sim.start()
        yield sim
    finally:
        sim.stop()
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def _network(network: str | None) -> list[str]:
    return ["--network", network] if network else []


def desktop_run(image: str | None = None, *, network: str | None = None,
                options: Sequence[str] = ()) -> list[str]:
    """``RUN.container`` of a desktop VM: ``docker run`` options, then the image (default: the
    desktop image at ``$CODA_IMAGE_TAG``); ``network``: the simulator's own
    (:attr:`Vcsim.network`)."""
    if image is None:
        from worker.providers.docker_base import project_image

        image = project_image("desktop")
    return ["--tmpfs", "/sys:rw", "--shm-size", "256m", *_network(network),
            "--env", f"CODA_DESKTOP_HOME_TEMPLATE={HOME_TEMPLATE}", *options, image]


def idle_run(image: str = TAR_IMAGE, *, network: str | None = None) -> list[str]:
    """``RUN.container`` of a VM whose guest does nothing (a light container: Debian, sleeping,
    stopped at once by its init)."""
    return ["--tmpfs", "/sys:rw", "--init", *_network(network), image, "sleep", "infinity"]


def create_vm(si: Any, name: str, run: Sequence[str] | None, *, snapshot: str | None = None,
              template: bool = False) -> Any:
    """A powered-off VM ``name`` in DC0's VM folder on host DC0_H0 whose container runs
    ``run`` (None: no container), with a snapshot ``snapshot`` and marked as a template when
    asked."""
    from pyVmomi import vim

    from worker.providers.vsphere import task_result

    content = si.RetrieveContent()
    dc = next(e for e in content.rootFolder.childEntity if isinstance(e, vim.Datacenter))
    host = next(c for c in dc.hostFolder.childEntity if c.name == "DC0_H0")
    extra = [vim.option.OptionValue(key="RUN.container", value=json.dumps(list(run)))] \
        if run is not None else []
    spec = vim.vm.ConfigSpec(name=name, guestId="otherGuest64", numCPUs=1, memoryMB=2048,
                             files=vim.vm.FileInfo(vmPathName=f"[{dc.datastore[0].name}]"),
                             extraConfig=extra)
    vm = task_result(si, dc.vmFolder.CreateVM_Task(config=spec, pool=host.resourcePool),
                     60, f"create {name}")
    if snapshot is not None:
        task_result(si, vm.CreateSnapshot_Task(name=snapshot, description="clean desktop",
                                               memory=False, quiesce=False),
                    60, f"snapshot {name}")
    if template:
        vm.MarkAsTemplate()
    return vm


# ``coda vcsim serve`` ------------------------------------------------------------------------

app = typer.Typer(help="VMware's vSphere simulator with desktop VMs (development).",
                  no_args_is_help=True)


@app.command()
def serve(
    image: Annotated[str | None, typer.Option(
        help="the desktop image the VMs run (default: coda-desktop:$CODA_IMAGE_TAG, latest "
             "when unset)")] = None,
    mode: Annotated[str, typer.Option(help="clone: a template to clone; revert: one VM per "
                                           "slot with a snapshot")] = "clone",
    slots: Annotated[int, typer.Option(help="revert mode: VMs to create")] = 2,
    prefix: Annotated[str, typer.Option(help="names of the VMs")] = "coda-dev",
) -> None:
    """Start the simulator with desktop VMs of IMAGE, print the worker's provider settings and
    serve until Ctrl-C or SIGTERM (then remove every VM's container)."""
    from coda.logging import configure_logging
    from coda_app.embedded import exit_on_sigterm

    configure_logging("INFO")
    # SIGTERM stops it as Ctrl-C does, and Ctrl-C works when SIGINT came ignored (a job started
    # with & by a non-interactive shell, as a CI run in the background): without this, neither
    # stopped it and the simulator with its VMs' containers ran on
    exit_on_sigterm()
    if mode not in ("clone", "revert"):
        raise typer.BadParameter("clone or revert", param_hint="--mode")
    with running() as sim:
        si = sim.connect()
        if mode == "clone":
            create_vm(si, f"{prefix}-template", desktop_run(image, network=sim.network),
                      snapshot="sci_bench",
                      template=True)
            options = sim.options(mode="clone", template=f"{prefix}-template",
                                  clone_prefix=f"{prefix}-clone")
        else:
            names = [f"{prefix}-vm-{i}" for i in range(slots)]
            for name in names:
                create_vm(si, name, desktop_run(image, network=sim.network),
                          snapshot="sci_bench")
            options = sim.options(mode="revert", vm_names=names)
        typer.echo(f"vcsim at {sim.url} (log {sim.log_path}); a worker on it:\n"
                   f"CODA_WORKER_PROVIDER=vsphere\n"
                   f"CODA_WORKER_PROVIDER_OPTIONS='{json.dumps(options)}'\n"
                   "Ctrl-C stops it.")
        try:
            while sim.proc is not None and sim.proc.poll() is None:
                time.sleep(1)
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM: a clean stop
            pass
