"""The ``local`` provider: per slot its own Xvfb display, window manager and guest agent on this
host, and a home directory restored from the slot image's template at every reset.

Start-up and reset probe readiness instead of sleeping: Xvfb reports its display number on a
file descriptor once it accepts clients (``-displayfd``), the window manager is up when it
publishes ``_NET_SUPPORTING_WM_CHECK``, the agent when ``/health`` answers, and the desktop when
a screenshot is not one flat colour (the root window gets a pattern). Reset closes everything
the slot's agent started (every process carries the slot's mark), waits until no window is
left, and restores the home directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from coda.contracts.desktop import BrokenReason, DesktopBroken, Health, ProviderDown, ProviderFault
from coda.guestenv import TOKEN_ENV
from coda.procs import free_port, kill_marked, stop_process
from coda.xserver import ROOT_PATTERN, start_xvfb, wait_for, wm_running, xauth_add
from worker.providers.base import Desktop, GuestLayout, Provider, log
from worker.providers.client import GuestClient, GuestError
from worker.providers.image import SCIENCEBOARD_IMAGE, SlotImage


@dataclass
class LocalSettings:
    """How local slots are built."""

    screen: tuple[int, int] = (1280, 800)
    root: Path | None = None  # where slot directories live (default: a new temporary dir)
    image: SlotImage = field(default_factory=lambda: SCIENCEBOARD_IMAGE)
    window_manager: tuple[str, ...] = ("openbox",)
    start_timeout_s: float = 30.0
    ready_timeout_s: float = 30.0
    close_timeout_s: float = 10.0


NOT_YET = (subprocess.TimeoutExpired, GuestError)
"""What a probe of a starting or closing slot raises while the answer is "not yet"."""
X_PROGRAMS = ("Xvfb", "xauth", "xsetroot", "xprop")
"""What every local desktop runs besides its window manager and the guest agent."""


def missing_programs(settings: LocalSettings, path: str | None = None) -> list[str]:
    """The programs a local desktop needs that are not on ``path`` (default: the worker's
    PATH, where the desktops' own is looked up as well)."""
    wanted = (*X_PROGRAMS, settings.window_manager[0])
    search = os.pathsep.join(p for p in (path or os.environ.get("PATH", ""),
                                         settings.image.path) if p)
    return [name for name in wanted if shutil.which(name, path=search) is None]


def programs_down(missing: list[str]) -> ProviderDown:
    return ProviderDown(ProviderFault.MISSING, BrokenReason.START_FAILED,
                        f"not installed: {', '.join(missing)} (bash scripts/desktop-deps.sh "
                        "installs the desktop packages)")


class LocalDesktop(Desktop):
    provider_name = "local"
    revert_restarts_guest = False  # reset closes the apps; the slot's agent keeps running

    def __init__(self, slot: int, settings: LocalSettings, root: Path) -> None:
        super().__init__(slot, ready_timeout_s=settings.ready_timeout_s)
        self.settings = settings
        self.id = f"local-{slot}-{uuid.uuid4().hex[:8]}"
        self.dir = root / self.id
        self.home = self.dir / "home"
        self.display: str | None = None
        self.token = secrets.token_urlsafe(24)
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # hooks -------------------------------------------------------------------------------

    def _start(self) -> GuestClient:
        try:
            return self._start_all()
        except FileNotFoundError as exc:  # a program of the desktop is not installed
            self._stop()
            missing = missing_programs(self.settings)
            raise programs_down(missing or [str(exc.filename or exc)]) from exc
        except Exception:
            self._stop()
            raise

    def _start_all(self) -> GuestClient:
        self.dir.mkdir(parents=True, exist_ok=True)
        run_dir = self.dir / "run"
        run_dir.mkdir(mode=0o700, exist_ok=True)
        tmp_dir = self.dir / "tmp"  # single-instance apps (TeXstudio) meet in TMPDIR: per slot
        tmp_dir.mkdir(mode=0o700, exist_ok=True)
        xauth = self.dir / "Xauthority"
        cookie = secrets.token_hex(16)
        xauth_add(xauth, ":0", cookie)  # the server reads every cookie in the file
        self.settings.image.populate(self.home)
        self.display = self._start_xvfb(xauth)
        xauth_add(xauth, self.display, cookie)  # the clients look theirs up by display
        base_env = {
            "PATH": self.settings.image.path, "HOME": str(self.home), "DISPLAY": self.display,
            "XAUTHORITY": str(xauth), "XDG_RUNTIME_DIR": str(run_dir), "TMPDIR": str(tmp_dir),
            "USER": "root",
            "SHELL": "/bin/sh", **self.settings.image.env,
        }
        self._start_wm(base_env)
        subprocess.run(["xsetroot", *ROOT_PATTERN], env=base_env, check=True, timeout=10)
        port = free_port()
        app_port = free_port()
        self.layout = GuestLayout(portlike=app_port, app_url=f"http://127.0.0.1:{app_port}",
                                  rewrites=self.settings.image.rewrites(self.home),
                                  programs=self.settings.image.programs())
        self._spawn("agent", [sys.executable, "-m", "worker.guest", "serve", "--host",
                              "127.0.0.1", "--port", str(port), "--display", self.display,
                              "--desktop-id", self.id],
                    env={**base_env, TOKEN_ENV: self.token})
        log.info("local.started", slot=self.slot, display=self.display, port=port)
        return GuestClient(f"http://127.0.0.1:{port}", token=self.token)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None,
               pass_fds: tuple[int, ...] = ()) -> None:
        """Start an infrastructure process in its own session, stderr to ``<name>.log``."""
        with (self.dir / f"{name}.log").open("ab") as err:
            self._procs[name] = subprocess.Popen(
                argv, env=env, pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    def _start_xvfb(self, xauth: Path) -> str:
        display = start_xvfb(self._spawn, self.settings.screen, xauth,
                             self.settings.start_timeout_s)
        if display is None:
            raise DesktopBroken(BrokenReason.START_FAILED,
                                f"Xvfb did not report a display: see {self.dir / 'xvfb.log'}")
        return display

    def _start_wm(self, env: dict[str, str]) -> None:
        self._spawn("wm", list(self.settings.window_manager), env=env)
        wait_for(lambda: wm_running(env), self.settings.start_timeout_s, "the window manager",
                 NOT_YET)

    def _revert(self) -> GuestClient | None:
        guest = self._guest()
        guest.close_apps()
        left = wait_for(lambda: not guest.windows(), self.settings.close_timeout_s, None, NOT_YET)
        if not left:
            raise DesktopBroken(BrokenReason.NOT_ANSWERING, "windows survived closing the apps")
        self.settings.image.populate(self.home)
        return None

    def _stop(self) -> None:
        agent = self._procs.pop("agent", None)
        if agent is not None:
            stop_process(agent, timeout=5)
        kill_marked(self.id)
        for name in ("wm", "xvfb"):
            proc = self._procs.pop(name, None)
            if proc is not None:
                stop_process(proc, timeout=5)
        self.display = None

    def _machine_health(self) -> Health:
        for name, reason in (("xvfb", BrokenReason.X_CRASHED), ("wm", BrokenReason.X_CRASHED),
                             ("agent", BrokenReason.AGENT_GONE)):
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                return Health(ok=False, reason=reason, detail=f"{name} is not running ({code})")
        return Health(ok=True)

    def _down(self) -> Health | None:
        h = self._machine_health()  # a poll of our own processes: free
        if h.ok:
            return None
        logs = {n: (self.dir / f"{n}.log") for n in ("agent", "xvfb", "wm")}
        tail = " | ".join(f"{n}: {p.read_text(errors='replace').strip()[-300:]}"
                          for n, p in logs.items() if p.exists() and p.stat().st_size)
        return Health(ok=False, reason=h.reason, detail=f"{h.detail}; {tail}".strip("; "))

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.dir, ignore_errors=True)


class LocalProvider(Provider[LocalDesktop]):
    name = "local"

    def __init__(self, settings: LocalSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or LocalSettings()
        self._own_root = self.settings.root is None
        self.root = self.settings.root or Path(tempfile.mkdtemp(prefix="coda-desktops-"))

    def probe(self) -> None:
        """The programs of a desktop are installed (Xvfb, xauth, xsetroot, xprop, the window
        manager)."""
        missing = missing_programs(self.settings)
        if missing:
            raise programs_down(missing)

    def _make(self, slot: int) -> LocalDesktop:
        return LocalDesktop(slot, self.settings, self.root)

    def close(self) -> None:
        super().close()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
