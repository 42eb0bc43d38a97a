"""Where ``scripts/celestia.sh`` installs Celestia (ScienceBoard's fork, built from source) on
this machine, computed as the script does: ``<root>/<key>``, the key hashing the pinned
archives' checksums, the patches and the script itself. Nothing here builds; the script does
(``scripts/test.sh`` and ``scripts/desktop-deps.sh`` run it, best effort)."""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "celestia.sh"
PATCHES = REPO / "deploy" / "celestia" / "patches"
BINARY = "bin/celestia-qt6"
SCIENCEBOARD_BINARY = "/app/bin/celestia-qt6"
"""The path ScienceBoard's tasks launch (its VM's package)."""
KEY_ENV = "CODA_CELESTIA_KEY"
BUILD_HINT = "build it with 'sudo bash scripts/celestia.sh' (about 11 minutes on 2 cores)"


def build_root(name: str, env: dict[str, str] | None = None) -> Path:
    """Where ``scripts/<name>.sh`` installs its builds (the scripts compute the same):
    ``$CODA_<NAME>_DIR``; else ``/var/lib/coda/<name>`` as root (following
    ``$CODA_EMBEDDED_ROOT``); else ``~/.cache/coda/<name>``."""
    env = dict(os.environ) if env is None else env
    given = env.get(f"CODA_{name.upper()}_DIR")
    if given:
        return Path(given)
    if os.geteuid() == 0:
        return Path(env.get("CODA_EMBEDDED_ROOT") or "/var/lib/coda") / name
    cache = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "coda" / name


def root(env: dict[str, str] | None = None) -> Path:
    """The script's install root: ``$CODA_CELESTIA_DIR``; else ``/var/lib/coda/celestia`` as
    root (following ``$CODA_EMBEDDED_ROOT``); else ``~/.cache/coda/celestia``."""
    return build_root("celestia", env)


@lru_cache(maxsize=1)
def key() -> str:
    """The script's ``<key>``: sha256 of ``"<fork sha256> <content sha256>\\n"``, the patches
    in order, then the script; its first 12 hex digits. Where the script is not there (the
    desktop image holds the worker package only) it is ``$CODA_CELESTIA_KEY``, which the image
    sets to the key of the build it copied from the host (``scripts/docker-build.sh``), else
    ``"none"``: no build."""
    if not SCRIPT.is_file():
        return os.environ.get(KEY_ENV) or "none"
    script = SCRIPT.read_bytes()
    sums = {name: value for name, value in
            re.findall(rb"^(FORK_SHA256|CONTENT_SHA256)=([0-9a-f]{64})$", script, re.M)}
    h = hashlib.sha256(sums[b"FORK_SHA256"] + b" " + sums[b"CONTENT_SHA256"] + b"\n")
    for patch in sorted(PATCHES.glob("*.patch")):
        h.update(patch.read_bytes())
    h.update(script)
    return h.hexdigest()[:12]


def prefix(env: dict[str, str] | None = None) -> Path:
    return root(env) / key()


def binary(env: dict[str, str] | None = None) -> Path:
    """The built ``celestia-qt6`` (whether it is there or not)."""
    return prefix(env) / BINARY


def is_built(env: dict[str, str] | None = None) -> bool:
    """The script finished a build and install for this checkout."""
    p = prefix(env)
    return (p / ".built").is_file() and os.access(p / BINARY, os.X_OK)
