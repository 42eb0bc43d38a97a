"""The local provider's slot image: the Debian packages a slot needs (``packages.txt``, which
``scripts/desktop-deps.sh`` installs), a home template copied into every slot at reset, the
environment applications get, and how ScienceBoard task files are rewritten for a local slot
(its home is not ``/home/user``; the patched ``/app/bin/kalgebra`` is Debian's ``kalgebra``)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from coda.logging import get_logger
from worker.providers.base import GUEST_HOME
from worker.providers.image import celestia, chimerax, grassdata

log = get_logger(__name__)

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Package:
    name: str
    command: str | None


def read_packages(path: Path = HERE / "packages.txt") -> list[Package]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, command = line.partition(" ")
            command = command.strip()
            out.append(Package(name, None if command in ("", "-") else command))
    return out


def missing_packages(packages: list[Package] | None = None) -> list[str]:
    """Packages of the image that are not installed on this host."""
    missing = []
    for p in packages or read_packages():
        if p.command is not None:
            if shutil.which(p.command) is None:
                missing.append(p.name)
            continue
        q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p.name], capture_output=True,
                           text=True, check=False)
        if "ok installed" not in q.stdout:
            missing.append(p.name)
    return missing


@dataclass(frozen=True)
class SlotImage:
    """What a fresh local slot looks like."""

    home_template: Path = HERE / "home"
    dirs: tuple[str, ...] = ("atelier", "Desktop", "Downloads")
    env: dict[str, str] = field(default_factory=lambda: {
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "QT_QPA_PLATFORM": "xcb",
        "LIBGL_ALWAYS_SOFTWARE": "1",
        # KAlgebra's help view is QtWebEngine (Chromium): as root it needs its sandbox off
        "QTWEBENGINE_DISABLE_SANDBOX": "1",
    })
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # applied in order, before the home directory is mapped
    command_rewrites: tuple[tuple[str, str], ...] = (
        ("LD_LIBRARY_PATH=/home/user/6.5.0/gcc_64/lib ", ""),  # ScienceBoard's Qt build
        ("/app/bin/kalgebra", "kalgebra"),  # ScienceBoard's patched KAlgebra -> Debian's
        # ScienceBoard's Celestia package -> the project's build of the same fork
        (celestia.SCIENCEBOARD_BINARY, str(celestia.binary())),
    )

    def rewrites(self, home: Path) -> list[tuple[str, str]]:
        return [*self.command_rewrites, (GUEST_HOME, str(home))]

    def programs(self) -> dict[str, str]:
        """Whole program names mapped to this host's binaries (not substring rewrites: the
        tasks' ``chimerax`` also appears in URLs and step names): ScienceBoard's ``chimerax``
        -> the project's build (``scripts/chimerax.sh``; the path even where it is not built,
        so that the launch can say how to build it)."""
        return {"chimerax": str(chimerax.launcher())}

    grassdata: Path | None = field(default_factory=grassdata.default_dest)
    """GRASS GIS's data sets (``grassdata.py``, built by the local desktop set-up), copied to
    ``~/grassdata`` at every reset: what a task changed in them is gone."""

    def populate(self, home: Path) -> None:
        """Make ``home`` a fresh copy of the template (any previous content is removed)."""
        if home.exists():
            shutil.rmtree(home)
        shutil.copytree(self.home_template, home, symlinks=True)
        for d in self.dirs:
            (home / d).mkdir(parents=True, exist_ok=True)
        if self.grassdata is not None and grassdata.is_built(self.grassdata):
            shutil.copytree(self.grassdata, home / "grassdata", symlinks=True)
        elif self.grassdata is not None and (self.grassdata / grassdata.STAMP).exists():
            log.warning("image.grassdata_stale", path=str(self.grassdata),
                        fix="scripts/desktop-deps.sh rebuilds it")


SCIENCEBOARD_IMAGE = SlotImage()
