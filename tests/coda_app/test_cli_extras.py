"""The master's image holds the core, the ``master`` extra and the packages its Dockerfile
copies (``coda``, ``coda_app``, ``master``: no Pillow, no torch, no worker), and checks itself
with ``coda --help`` (``deploy/docker/Dockerfile.master``): the CLI and the master import
nothing else. A module import that pulls in Pillow (as ``coda_app.stack`` does) must stay
lazy. Here everything else is made absent, as it is in that image, without building it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORT_NAMES = {"pillow": "PIL", "python3-xlib": "Xlib", "pyvmomi": "pyVmomi",
                "ui-tars": "ui_tars"}
"""Distributions whose import name is not their name with ``-`` as ``_``."""
OWN_EXTRAS = ("master", "dev")  # in the image, or not installed anywhere it matters

PROBE = """
import importlib.abc, importlib.util, runpy, sys
BLOCKED = set(sys.argv[1].split(","))
def absent(name):
    return name.partition(".")[0] in BLOCKED
class NotInTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if absent(name):
            raise ModuleNotFoundError(f"No module named {name!r} (not in the master's image)")
        return None
sys.meta_path.insert(0, NotInTheImage())
find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if absent(name) else find_spec(name, package))
import master.app
sys.argv = ["coda", "--help"]
runpy.run_module("coda_app.cli", run_name="__main__")
"""


def distribution(requirement: str) -> str:
    return requirement.split("[")[0].split("=")[0].split("<")[0].split(">")[0].strip().lower()


def not_in_the_master_image() -> set[str]:
    """Import names of the distributions only the other extras install, and the project's
    packages the Dockerfile does not copy."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras: dict[str, list[str]] = project["optional-dependencies"]
    kept = {distribution(r) for r in project["dependencies"]}
    kept |= {distribution(r) for name in OWN_EXTRAS for r in extras[name]}
    others = {distribution(r) for name, reqs in extras.items() if name not in OWN_EXTRAS
              for r in reqs if not r.startswith("coda[")}
    dockerfile = (ROOT / "deploy" / "docker" / "Dockerfile.master").read_text()
    copied = set(re.findall(r"^COPY (\w+) \./\1$", dockerfile, re.MULTILINE))
    ours = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - copied
    return {IMPORT_NAMES.get(d, d.replace("-", "_")) for d in others - kept} | ours


def test_the_blocked_set_holds_the_heavy_packages() -> None:
    blocked = not_in_the_master_image()
    assert {"PIL", "torch", "transformers", "Xlib", "pyautogui", "docker", "worker"} <= blocked
    assert not blocked & {"fastapi", "sqlalchemy", "pydantic", "typer", "coda", "master"}


def test_coda_help_and_the_master_import_without_the_other_extras() -> None:
    run = subprocess.run([sys.executable, "-c", PROBE, ",".join(sorted(not_in_the_master_image()))],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Usage" in run.stdout
