"""Where ``scripts/chimerax.sh`` installs UCSF ChimeraX (built from RBVI's sources, with
ScienceBoard's SessionStates bundle) on this machine, computed as the script does:
``<root>/<key>``, the key hashing the pinned archives' checksums and the script itself. Nothing
here builds; the script does (``scripts/test.sh`` runs it, best effort). ChimeraX's licence is
non-commercial and forbids redistribution: no desktop image or repository file holds it, so a
build is always this machine's own."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from worker.providers.image.celestia import build_root

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "chimerax.sh"
LAUNCHER = "bin/chimerax"
"""The launcher the script writes (software GL, no Chromium sandbox, never ChimeraX as root)."""
STATES_BUNDLE = "share/chimerax-states"
"""ScienceBoard's SessionStates bundle (the ``states`` command), installed into the build."""
BUILD_HINT = ("build it with 'bash scripts/chimerax.sh' (as root, or it asks for Debian's "
              "packages; 20-30 minutes on 2 cores; by building it you accept UCSF ChimeraX's "
              "non-commercial licence)")


def root(env: dict[str, str] | None = None) -> Path:
    """The script's install root: ``$CODA_CHIMERAX_DIR``; else ``/var/lib/coda/chimerax`` as
    root (following ``$CODA_EMBEDDED_ROOT``); else ``~/.cache/coda/chimerax``."""
    return build_root("chimerax", env)


def key(script: Path = SCRIPT) -> str:
    """The script's ``<key>``: sha256 of ``"<ChimeraX sha256> <SessionStates sha256>\\n"``
    then the script; its first 12 hex digits; ``"none"`` without the script."""
    if not script.is_file():
        return "none"
    text = script.read_bytes()
    sums = dict(re.findall(rb"^(CX_SHA256|STATES_SHA256)=([0-9a-f]{64})$", text, re.M))
    h = hashlib.sha256(sums[b"CX_SHA256"] + b" " + sums[b"STATES_SHA256"] + b"\n")
    h.update(text)
    return h.hexdigest()[:12]


def prefix(env: dict[str, str] | None = None) -> Path:
    return root(env) / key()


def launcher(env: dict[str, str] | None = None) -> Path:
    """The built ``bin/chimerax`` (whether it is there or not)."""
    return prefix(env) / LAUNCHER


def is_built(env: dict[str, str] | None = None) -> bool:
    """The script finished a build and install for this checkout."""
    p = prefix(env)
    return (p / ".built").is_file() and os.access(p / LAUNCHER, os.X_OK)
