"""The import contracts of pyproject.toml (`[tool.importlinter]`): coda_app above the services,
each service on its own, the shared library coda below them all; no import circle between the
modules of any package; the desktop side of the worker (the guest agent and its session) apart
from the driver side; the trainer's two stages on their own over their shared core. The same
check as CI's `lint-imports`, so `scripts/test.sh` catches a violation too."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = (ROOT / "pyproject.toml").read_text()
CONFIG = tomllib.loads(PYPROJECT)["tool"]["importlinter"]
CONTRACT_TEXT = "[tool.importlinter]" + PYPROJECT.split("[tool.importlinter]", 1)[1].split(
    "\n[tool.", 1)[0]
"""Our `[tool.importlinter]` tables as they are written (up to the next `[tool.*]` table)."""


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the packages under ``cwd`` with the configuration found there."""
    code = "import sys; from importlinter.cli import lint_imports; " \
           "sys.exit(lint_imports(no_cache=True, no_logo=True))"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(cwd)},
                          check=False)


def test_the_code_keeps_the_layers() -> None:
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_the_contract_names_every_top_level_package() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert set(CONFIG["root_packages"]) == packages


def _skeleton(tmp_path: Path) -> Path:
    """Our packages and modules, every one empty, with our contracts."""
    for name in CONFIG["root_packages"]:
        for module in (ROOT / name).rglob("*.py"):
            empty = tmp_path / module.relative_to(ROOT)
            empty.parent.mkdir(parents=True, exist_ok=True)
            empty.write_text("")
    (tmp_path / "pyproject.toml").write_text(CONTRACT_TEXT)
    return tmp_path


def _tree(tmp_path: Path, importer: str, imported: str) -> Path:
    """Our skeleton, with one import ``importer -> imported``."""
    _skeleton(tmp_path)
    (tmp_path / importer / "bad.py").write_text(f"import {imported}\n")
    return tmp_path


@pytest.mark.parametrize(("importer", "imported"), [
    ("worker", "trainer"),            # a service never imports another service
    ("trainer", "planner_service"),
    ("coda", "master"),               # the library imports no service
    ("master", "coda_app"),           # nor does a service import the application
])
def test_the_contract_refuses(tmp_path: Path, importer: str, imported: str) -> None:
    out = lint_imports(_tree(tmp_path, importer, imported))
    assert out.returncode != 0, out.stdout
    assert f"{importer} is not allowed to import {imported}" in out.stdout


def test_the_contract_allows_the_application_and_the_library(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    tree = _tree(tmp_path / "ok", "coda_app", "master")
    (tree / "trainer" / "config.py").write_text("import coda\n")
    out = lint_imports(tree)
    assert out.returncode == 0, out.stdout


@pytest.mark.parametrize(("one", "other", "package"), [
    # the circles cut by a module of their own; back, they are refused
    ("worker/providers/docker.py", "worker.providers.docker_desktop", "worker.providers"),
    ("worker/providers/docker_desktop.py", "worker.providers.docker", "worker.providers"),
    ("worker/tasks/adapters/kalgebra/adapter.py", "worker.tasks.setup", "worker.tasks"),
    ("worker/tasks/setup.py", "worker.tasks.adapters", "worker.tasks"),
    ("master/metrics.py", "master.state", "master"),
    ("master/state.py", "master.metrics", "master"),
    ("worker/settings.py", "worker.providers.base", "worker"),
    ("worker/providers/docker.py", "worker.settings", "worker"),
])
def test_the_contract_refuses_a_circle(tmp_path: Path, one: str, other: str,
                                       package: str) -> None:
    """Each half of an old circle alone is allowed; both together are refused, however the
    import is written (at the top, in a function, under TYPE_CHECKING)."""
    tree = _skeleton(tmp_path)
    back = {"worker.providers.docker_desktop": ("worker/providers/docker_desktop.py",
                                                "worker.providers.docker"),
            "worker.providers.docker": ("worker/providers/docker.py",
                                        "worker.providers.docker_desktop"),
            "worker.tasks.setup": ("worker/tasks/setup.py", "worker.tasks.adapters"),
            "worker.tasks.adapters": ("worker/tasks/adapters/kalgebra/adapter.py",
                                      "worker.tasks.setup"),
            "master.state": ("master/state.py", "master.metrics"),
            "master.metrics": ("master/metrics.py", "master.state"),
            "worker.providers.base": ("worker/providers/docker.py", "worker.settings"),
            "worker.settings": ("worker/settings.py", "worker.providers.base")}[other]
    (tree / one).write_text(f"import {other}\n")
    out = lint_imports(tree)
    assert out.returncode == 0, out.stdout  # one way is fine
    (tree / back[0]).write_text("from typing import TYPE_CHECKING\n\n"
                                f"if TYPE_CHECKING:\n    import {back[1]}\n\n\n"
                                f"def late() -> None:\n    import {back[1]}\n")
    out = lint_imports(tree)
    assert out.returncode != 0, out.stdout
    assert f"No cycles are allowed in {package}." in out.stdout


@pytest.mark.parametrize(("importer", "imported", "contract"), [
    ("worker/providers/client.py", "worker.guest.capture", "worker.providers"),
    ("worker/providers/vsphere.py", "worker.guest.guestinfo", "worker.providers"),
    ("worker/tasks/setup.py", "worker.guest.commands", "worker.tasks"),
    ("worker/runner.py", "worker.guest.session", "worker.runner"),
    ("worker/guest/session.py", "worker.providers.local", "worker.guest"),
    ("worker/guest/app.py", "worker.tasks.polling", "worker.guest"),
])
def test_the_desktop_side_stands_apart_from_the_driver_side(tmp_path: Path, importer: str,
                                                             imported: str, contract: str) -> None:
    """A provider, a task or the worker's loop never imports the in-desktop agent or its
    session (they share coda/), nor does the agent import them."""
    tree = _skeleton(tmp_path)
    (tree / importer).write_text(f"import {imported}\n")
    out = lint_imports(tree)
    assert out.returncode != 0, out.stdout
    side = "worker.guest" if imported.startswith("worker.guest") else imported.rsplit(".", 1)[0]
    assert f"{contract} is not allowed to import {side}" in out.stdout


@pytest.mark.parametrize(("importer", "imported"), [
    ("trainer/sft/train.py", "trainer.grpo.losses"),   # the stages do not import each other
    ("trainer/grpo/loop.py", "trainer.sft.dataset"),
    ("trainer/config.py", "trainer.grpo.losses"),      # the shared core imports no stage
    ("trainer/data.py", "trainer.sft"),
])
def test_the_trainer_stages_stand_on_their_own(tmp_path: Path, importer: str,
                                               imported: str) -> None:
    tree = _skeleton(tmp_path)
    (tree / importer).write_text(f"import {imported}\n")
    out = lint_imports(tree)
    assert out.returncode != 0, out.stdout
    assert "trainer: stage 1 (grpo) and stage 2 (sft)" in out.stdout
    assert " is not allowed to import " in out.stdout


def test_a_new_trainer_module_must_say_which_stage_it_belongs_to(tmp_path: Path) -> None:
    tree = _skeleton(tmp_path)
    (tree / "trainer" / "newthing.py").write_text("")
    out = lint_imports(tree)
    assert out.returncode != 0, out.stdout
    assert "trainer.newthing" in out.stdout
