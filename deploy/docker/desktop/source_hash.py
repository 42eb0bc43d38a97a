"""The hash of what the desktop slot image is built from (the project's sources it installs,
pyproject.toml, this directory and the Dockerfile): the image records it at build time in
/opt/coda/source.sha256, and the tests' ``desktop_image`` fixture rebuilds an image whose hash
is not the checkout's. ``python source_hash.py [ROOT]`` prints it.

It also covers the Celestia build the image holds: the key of this machine's build
(``scripts/celestia.sh``; the image's, from its ``CODA_CELESTIA_KEY``), or ``none`` where there
is none, so that an image is rebuilt when Celestia's build changes or first appears."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

TREES = ("coda", "coda_app", "worker", "deploy/docker/desktop")
FILES = ("pyproject.toml", "deploy/docker/Dockerfile.desktop")


def source_hash(root: Path) -> str:
    paths = [root / f for f in FILES]
    for tree in TREES:
        paths += [p for p in (root / tree).rglob("*") if p.is_file()
                  and "__pycache__" not in p.parts and p.suffix != ".pyc"]
    digest = hashlib.sha256()
    for p in sorted(paths):
        digest.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    digest.update(b"celestia\0" + celestia_build().encode())
    return digest.hexdigest()


def celestia_build() -> str:
    """The key of the Celestia build here (the image's: its ``CODA_CELESTIA_KEY``), or
    ``none`` (also with ``CODA_DOCKER_CELESTIA=0``, as ``scripts/docker-build.sh``)."""
    from worker.providers.image import celestia

    if os.environ.get("CODA_DOCKER_CELESTIA") == "0" or not celestia.is_built():
        return "none"
    return celestia.key()


if __name__ == "__main__":
    sys.stdout.write(source_hash(Path(sys.argv[1] if len(sys.argv) > 1 else ".")) + "\n")
