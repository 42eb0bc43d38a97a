"""Starting an X session on this machine, with readiness probes instead of sleeps: Xvfb
reports its display on a file descriptor once it accepts clients (``-displayfd``), only clients
holding the session's cookie may connect, the window manager is up when it publishes
``_NET_SUPPORTING_WM_CHECK``, and the root window gets a pattern that tells a started desktop
from a blank screen. Shared by the driver side and the desktop side: the local provider's
slots (:mod:`worker.providers.local`) and the desktop container's session
(:mod:`worker.guest.session`). (The agent's own connection to its display is
:mod:`worker.guest.xsession`.)"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from coda.contracts.desktop import BrokenReason, DesktopBroken
from coda.logging import get_logger

log = get_logger("coda.xserver")

ROOT_PATTERN = ["-mod", "8", "8", "-fg", "#4a6c94", "-bg", "#3b5a80"]


def wait_for(check: Callable[[], bool], timeout: float, what: str | None,
             not_yet: tuple[type[Exception], ...] = (subprocess.TimeoutExpired,)) -> bool:
    """Poll ``check()`` until true; raise (naming ``what``) or return False after ``timeout``.
    A probe that cannot answer yet (``xprop`` timing out; an error of ``not_yet``, such as the
    agent answering an error) is "not yet", logged; any other error is raised."""
    deadline = time.monotonic() + timeout
    last: str | None = None
    while True:
        try:
            if check():
                return True
        except not_yet as exc:
            last = f"{type(exc).__name__}: {exc}"
            log.debug("local.probe_not_yet", what=what, error=last)
        if time.monotonic() >= deadline:
            if what is None:
                return False
            raise DesktopBroken(BrokenReason.START_FAILED, f"{what} did not start in "
                                f"{timeout:g} s" + (f" (last: {last})" if last else ""))
        time.sleep(0.02)


def xauth_add(path: Path, display_name: str, cookie: str) -> None:
    """Add an MIT-MAGIC-COOKIE-1 entry: only clients holding the slot's file may connect."""
    subprocess.run(["xauth", "-q", "-f", str(path), "add", display_name, "MIT-MAGIC-COOKIE-1",
                    cookie], check=True, timeout=10, capture_output=True)


def start_xvfb(spawn: Callable[..., None], screen: tuple[int, int], xauth: Path,
               timeout: float) -> str | None:
    """Start Xvfb through ``spawn(name, argv, pass_fds=...)``; the display it reports (``:N``,
    from ``-displayfd`` once it accepts clients), or None when it reports none in time."""
    w, h = screen
    read_fd, write_fd = os.pipe()
    try:
        spawn("xvfb", ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", f"{w}x{h}x24",
                       "-nolisten", "tcp", "-noreset", "-auth", str(xauth)],
              pass_fds=(write_fd,))
        os.close(write_fd)
        number = _read_line(read_fd, timeout)
    finally:
        os.close(read_fd)
    return f":{number}" if number.isdigit() else None


def _read_line(fd: int, timeout: float) -> str:
    """Read up to a newline (Xvfb writes the number, then the newline) or end of file."""
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 64) if ready else b""
        if not chunk:
            break
        data += chunk
    return data.decode().strip()


def wm_running(env: dict[str, str]) -> bool:
    """The window manager published ``_NET_SUPPORTING_WM_CHECK`` on the root window (EWMH)."""
    out = subprocess.run(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], env=env,
                         capture_output=True, text=True, timeout=10, check=False).stdout
    return "window id #" in out
