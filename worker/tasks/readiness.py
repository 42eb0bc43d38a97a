"""Task readiness: when the task's application is ready for the agent (its main window is on
the desktop), and which window title says so."""

from __future__ import annotations

import re
import time

from coda.logging import get_logger
from coda.tasks import TaskSpec
from worker.providers.base import Desktop

log = get_logger("worker.tasks.readiness")

LAUNCHING = frozenset({"launch", "open", "execute", "command"})
"""Setup steps that may start the task's application."""


_FILE_NAME = re.compile(r"^[^/=]+\.[A-Za-z][A-Za-z0-9]{0,7}$")


def _file_names(value: str) -> list[str]:
    """Names of the files a command line or path names (``/x/main.tex`` -> ``main.tex``)."""
    out = []
    for arg in value.split():
        name = arg.strip("'\"").rsplit("/", 1)[-1]
        if "/" in arg and "=" not in arg and _FILE_NAME.match(name):
            out.append(name)
    return out


def ready_titles(task: TaskSpec) -> list[str]:
    """What the title of the task's ready window contains (pure): the names of the files its
    setup opens (document applications title their main window with the file, and a splash
    screen shows no file name), else the application's name."""
    names: list[str] = []
    for step in task.setup:
        if step.func not in LAUNCHING:
            continue
        extra = step.model_extra or {}
        for key in ("command", "path", "file"):
            value = extra.get(key)
            parts = value if isinstance(value, list) else [value]
            for part in parts:
                if isinstance(part, str):
                    names += _file_names(part)
    return list(dict.fromkeys(names)) or [task.app]


def wait_for_app(desktop: Desktop, titles: list[str], timeout_s: float,
                 poll_s: float = 0.2) -> bool:
    """Wait until a window whose title contains one of ``titles`` (case-insensitive) is on the
    desktop, at most ``timeout_s``; whether it appeared. Titles, not window classes: a splash
    screen shares the application's class, and keys sent to it are lost. Guests that cannot
    list windows (OSWorld's) answer at once with False, and the screen settling is all the
    worker waits for."""
    guest = desktop.guest
    needles = [t.lower() for t in titles]
    deadline = time.monotonic() + timeout_s
    while guest is not None:
        windows = guest.windows()
        if windows is None:
            return False
        for w in windows:
            title = str(w.get("title", "")).lower()
            if any(n in title for n in needles):
                return True
        if time.monotonic() >= deadline:
            log.warning("episode.app_not_seen", titles=titles, seconds=timeout_s)
            return False
        time.sleep(poll_s)
    return False
