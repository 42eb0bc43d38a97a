"""One desktop session in this machine: Xvfb, the window manager and the guest agent, started
with the local provider's readiness probes and supervised. The entry point of the desktop slot
image (``deploy/docker/Dockerfile.desktop``): ``python -m worker.guest.session serve``. It is
the desktop side, as the agent is: no provider imports it (the exit codes a provider reads are
:data:`coda.contracts.desktop.SESSION_EXIT_REASONS`).

Start-up probes instead of sleeping, as the local provider does: Xvfb reports its display on a
file descriptor once it accepts clients (``-displayfd``), the window manager is up when it
publishes ``_NET_SUPPORTING_WM_CHECK``; the root window gets the pattern that tells a started
desktop from a blank screen; then the agent serves (the docker provider probes its ``/health``
and a screenshot, as for every desktop). Only clients holding the session's X cookie
(``$XDG_RUNTIME_DIR/Xauthority``) may connect to the display.

Supervision: when Xvfb, the window manager or the agent exits, the others are stopped and the
session exits with a code naming the one that died (:data:`SESSION_EXIT_CODES`), so the
container's exit code carries a typed reason to the provider. ``SIGTERM`` / ``SIGINT`` stop
everything (exit 0). Settings come from the environment (the image sets them):

* ``CODA_GUEST_TOKEN`` (required, >= 16 characters: the session refuses to start without one),
  or else the VM's ``guestinfo.coda.token`` (:mod:`worker.guest.guestinfo`: VMware Tools' RPC,
  or the ``VMX_GUESTINFO_CODA_TOKEN`` variable VMware's simulator gives a container-backed VM),
  how the ``vsphere`` provider hands it over; neither the window manager nor the applications
  see it or any other guestinfo value;
* ``CODA_DESKTOP_HOME_TEMPLATE`` (unset): when set, every start first makes the home a fresh
  copy of this template and empties what the desktop user left in ``/tmp``, ``/var/tmp`` and
  ``/dev/shm``: a desktop VM of the simulator, whose disk a snapshot revert does not reset, then
  boots clean (``coda_app/vcsim.py`` sets it; the image's template is ``/opt/coda/home``);
* ``CODA_DESKTOP_SCREEN`` (``1280x800``), ``CODA_GUEST_PORT`` (5000), ``CODA_GUEST_HOST``
  (``0.0.0.0``: the container's port is published on the host's loopback by the provider),
  ``CODA_DESKTOP_ID`` (marks every process the agent starts; default the host name),
  ``CODA_DESKTOP_WM`` (``openbox``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from coda.contracts.desktop import (
    SESSION_EXIT_CODES,
    SESSION_EXIT_CONFIG,
    SESSION_EXIT_START,
)
from coda.guestenv import MIN_TOKEN_LENGTH, TOKEN_ENV, TOKEN_KEY, is_guestinfo_env
from coda.logging import configure_logging, get_logger
from coda.procs import stop_process
from coda.xserver import ROOT_PATTERN, start_xvfb, wait_for, wm_running, xauth_add
from worker.guest.guestinfo import read_guestinfo
from worker.guest.home import HomeTemplateMissing, restore_home

log = get_logger("desktop.session")

X_DEATH_WINDOW_S = 2.0
"""After the window manager or agent exits, how long to look whether Xvfb exited too."""


class SessionError(ValueError):
    """Bad settings: the session refuses to start."""


@dataclass(frozen=True)
class SessionSettings:
    token: str
    screen: tuple[int, int] = (1280, 800)
    port: int = 5000
    host: str = "0.0.0.0"
    desktop_id: str = "coda-desktop"
    window_manager: tuple[str, ...] = ("openbox",)
    run_dir: Path = Path("/run/coda")
    start_timeout_s: float = 30.0
    home_template: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SessionSettings:
        token = env.get(TOKEN_ENV) or read_guestinfo(TOKEN_KEY, env) or ""
        if len(token) < MIN_TOKEN_LENGTH:
            raise SessionError(f"refusing to start: set {TOKEN_ENV} (or the VM's "
                               f"guestinfo.{TOKEN_KEY}) to a secret of at least "
                               f"{MIN_TOKEN_LENGTH} characters (`coda guest token` makes one)")
        template = env.get("CODA_DESKTOP_HOME_TEMPLATE")
        return cls(token=token, screen=parse_screen(env.get("CODA_DESKTOP_SCREEN", "1280x800")),
                   port=int(env.get("CODA_GUEST_PORT", "5000")),
                   host=env.get("CODA_GUEST_HOST", "0.0.0.0"),
                   desktop_id=env.get("CODA_DESKTOP_ID") or socket.gethostname(),
                   window_manager=tuple(env.get("CODA_DESKTOP_WM", "openbox").split()),
                   run_dir=Path(env.get("XDG_RUNTIME_DIR") or "/run/coda"),
                   home_template=Path(template) if template else None)


def parse_screen(value: str) -> tuple[int, int]:
    """``1280x800`` -> (1280, 800)."""
    w, sep, h = value.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 64 or int(h) < 64:
        raise SessionError(f"CODA_DESKTOP_SCREEN: expected WIDTHxHEIGHT, got {value!r}")
    return int(w), int(h)


class _Stop(Exception):
    """A stop signal arrived."""


def _on_signal(signum: int, _: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


class Session:
    """The three processes of one desktop."""

    def __init__(self, settings: SessionSettings) -> None:
        self.s = settings
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.display: str | None = None

    def start(self) -> None:
        """Xvfb, the window manager and the agent, each probed before the next starts."""
        if self.s.home_template is not None:
            try:
                restore_home(self.s.home_template, Path.home())
            except HomeTemplateMissing as exc:
                raise SessionError(f"CODA_DESKTOP_HOME_TEMPLATE: {exc}") from None
            log.info("desktop.session_home_restored", template=str(self.s.home_template))
        self.s.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        xauth = self.s.run_dir / "Xauthority"
        xauth.unlink(missing_ok=True)
        cookie = secrets.token_hex(16)
        xauth_add(xauth, ":0", cookie)  # the server reads every cookie in the file
        self.display = self._start_xvfb(xauth)
        xauth_add(xauth, self.display, cookie)  # the clients look theirs up by display
        env = {k: v for k, v in os.environ.items()  # the applications never see the token
               if k != TOKEN_ENV and not is_guestinfo_env(k)}
        env.update(DISPLAY=self.display, XAUTHORITY=str(xauth))
        self._spawn("wm", list(self.s.window_manager), env)
        wait_for(lambda: wm_running(env), self.s.start_timeout_s, "the window manager")
        subprocess.run(["xsetroot", *ROOT_PATTERN], env=env, check=True, timeout=10)
        self._spawn("agent", [sys.executable, "-m", "worker.guest", "serve", "--host", self.s.host,
                              "--port", str(self.s.port), "--display", self.display,
                              "--desktop-id", self.s.desktop_id],
                    {**env, TOKEN_ENV: self.s.token})
        w, h = self.s.screen
        log.info("desktop.session_started", display=self.display, screen=f"{w}x{h}",
                 port=self.s.port, pids={n: p.pid for n, p in self.procs.items()})

    def _spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
               pass_fds: tuple[int, ...] = ()) -> None:
        """Its output goes to the session's (the container's log)."""
        self.procs[name] = subprocess.Popen(list(argv), env=env, pass_fds=pass_fds,
                                            stdin=subprocess.DEVNULL)

    def _start_xvfb(self, xauth: Path) -> str:
        display = start_xvfb(self._spawn, self.s.screen, xauth, self.s.start_timeout_s)
        if display is None:
            raise SessionError("Xvfb did not report a display (its output is above)")
        return display

    def wait(self) -> int:
        """Until one of the processes exits (its exit code, :data:`SESSION_EXIT_CODES`) or a stop
        signal arrives (0)."""
        by_pid = {p.pid: n for n, p in self.procs.items()}
        try:
            while True:
                pid, status = os.wait()
                name = by_pid.get(pid)
                if name is None:
                    continue  # something of ours that the agent did not wait for
                self.procs[name].returncode = os.waitstatus_to_exitcode(status)
                if name != "xvfb" and self._x_died_too():
                    name = "xvfb"  # the window manager or agent lost its display: X is the cause
                log.error("desktop.session_process_exited", process=name,
                          code=self.procs[name].returncode)
                return SESSION_EXIT_CODES[name]
        except _Stop as stop:
            log.info("desktop.session_stopping", signal=str(stop))
            return 0

    def _x_died_too(self, within_s: float = X_DEATH_WINDOW_S) -> bool:
        """Whether Xvfb exited as well (reaped here). A killed X server closes its clients'
        connections while it exits, so they may be reaped first; a short bounded look settles
        which one died first."""
        xvfb = self.procs.get("xvfb")
        if xvfb is None or xvfb.returncode is not None:
            return xvfb is not None
        deadline = time.monotonic() + within_s
        while True:
            pid, status = os.waitpid(xvfb.pid, os.WNOHANG)
            if pid:
                xvfb.returncode = os.waitstatus_to_exitcode(status)
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def stop(self) -> None:
        for name in ("agent", "wm", "xvfb"):
            proc = self.procs.pop(name, None)
            if proc is not None and proc.returncode is None:
                stop_process(proc, timeout=5)


def serve(env: Mapping[str, str]) -> int:
    """Start the session and supervise it; the exit code (:data:`SESSION_EXIT_CODES`)."""
    try:
        settings = SessionSettings.from_env(env)
    except (SessionError, ValueError) as exc:
        log.error("desktop.session_refused", detail=str(exc))
        return SESSION_EXIT_CONFIG
    session = Session(settings)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    try:
        session.start()
        return session.wait()
    except _Stop as stop:
        log.info("desktop.session_stopping", signal=str(stop))
        return 0
    except Exception as exc:  # the session's top level: logged, its exit code
        log.error("desktop.session_start_failed", detail=str(exc), exc_info=True)
        return SESSION_EXIT_START
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        session.stop()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m worker.guest.session",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["serve"])
    p.parse_args(argv)
    configure_logging(os.environ.get("CODA_LOG_LEVEL", "INFO"))
    sys.exit(serve(os.environ))


if __name__ == "__main__":
    main()
