"""A desktop's home made a fresh copy of its template, as the desktop user: at a session's
start (:mod:`worker.guest.session`) and by the agent between episodes
(``POST /coda/restore``, the docker provider's fast reset)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path


class HomeTemplateMissing(RuntimeError):
    """The configured home template is not a directory."""


def restore_home(template: Path, home: Path,
                 temporary: Sequence[Path] = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")),
                 ) -> None:
    """Make ``home`` a fresh copy of ``template`` and remove what this user left in the
    temporary directories (not the X server's socket directory and locks, not the agent's
    files): what ``coda-desktop-restore`` does as root, done by the desktop user at boot and
    by the agent's ``POST /coda/restore``."""
    if not template.is_dir():
        raise HomeTemplateMissing(f"home template {template} is not a directory")
    for entry in home.iterdir():
        _remove(entry)
    shutil.copytree(template, home, symlinks=True, dirs_exist_ok=True)
    me = os.getuid()
    for directory in temporary:
        if not directory.is_dir():
            continue
        for entry in directory.iterdir():
            keep = (entry.name == ".X11-unix" or entry.name.startswith(".X")
                    or entry.name.startswith("coda-guest-"))
            if not keep and entry.lstat().st_uid == me:
                _remove(entry)


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()
