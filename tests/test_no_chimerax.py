"""UCSF ChimeraX's licence (non-commercial, no redistribution) keeps every part of it out of the
repository: its sources, patched copies of its files, built wheels, a venv. The project holds
only scripts/chimerax.sh (with the cxservices stub it writes), the code that drives ChimeraX,
and docs. This test reads every file git tracks or would add (untracked, not ignored)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# marker strings split so that this file does not carry them
MARKERS = [
    "=== UCSF ChimeraX " + "Copyright ===",  # the header of each ChimeraX source file
    "Copyright 2016 Regents of the University of California." + "\n# All rights reserved.",
    "concerns certain software known as " + "\u201cUCSF ChimeraX,\u201d",  # License.md
    "Resource for Biocomputing, Visualization and Informatics (" + "\u201cRBVI\u201d)",
]
NAMES = ("bundle_info.xml", "License.md", "copyright.txt", "mkbuildinfo", "last-commit")
"""File names of ChimeraX's tree (and its bundles) that the project has no file of."""
SUFFIXES = (".whl",)
PARTS = ("chimerax-6911d7bf", "chimerax-states-", "site-packages", "bundle_builder")


def _files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=REPO, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def test_no_chimerax_file_in_the_tree() -> None:
    found: list[str] = []
    for rel in _files():
        path = REPO / rel
        if not path.is_file() or path.is_symlink():
            continue
        name = path.name
        if name in NAMES or name.endswith(SUFFIXES) or any(p in rel for p in PARTS):
            found.append(f"{rel}: a ChimeraX-like name")
            continue
        if path.stat().st_size > 20_000_000:
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        found += [f"{rel}: carries {m[:40]!r}" for m in MARKERS if m in text]
    assert not found, "ChimeraX files in the repository:\n" + "\n".join(found)


def test_the_markers_catch_a_chimerax_header() -> None:
    header = ("# === UCSF ChimeraX " + "Copyright ===\n"
              "# Copyright 2016 Regents of the University of California.\n"
              "# All rights reserved.  This software provided pursuant to a\n")
    assert any(m in header for m in MARKERS)
