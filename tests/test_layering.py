"""The layering contract of pyproject.toml (`[tool.importlinter]`): coda_app above the services,
each service on its own, the shared library coda below them all. The same check as CI's
`lint-imports`, so `scripts/test.sh` catches a violation too."""

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


def _tree(tmp_path: Path, importer: str, imported: str) -> Path:
    """Empty packages named like ours, with one import ``importer -> imported``."""
    for name in CONFIG["root_packages"]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / importer / "bad.py").write_text(f"import {imported}\n")
    (tmp_path / "pyproject.toml").write_text(CONTRACT_TEXT)
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
    (tree / "trainer" / "good.py").write_text("import coda\n")
    out = lint_imports(tree)
    assert out.returncode == 0, out.stdout
