"""A name another module imports is public: no module imports a ``_private`` name of another
module of the project, or reaches one through a module (``module._name``), anywhere in the
tree (packages, tests, benchmarks, scripts). What two modules share is part of an interface,
and the name says so."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = {p.parent.name for p in ROOT.glob("*/__init__.py")}
"""Our top-level packages (tests and benchmarks included)."""
SEARCHED = PROJECT | {"scripts"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(source: str) -> list[str]:
    """``from ours import _name`` and ``ours_module._name`` in ``source`` (``line: what``)."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> one of our modules (or a name from one)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] in PROJECT:
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                else:
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT:
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and \
                isinstance(node.value, ast.Name) and node.value.id in modules:
            found.append(f"{node.lineno}: {modules[node.value.id]}.{node.attr}")
    return sorted(found, key=lambda use: int(use.split(":", 1)[0]))


def test_no_module_uses_a_private_name_of_another() -> None:
    offences = []
    for top in sorted(SEARCHED):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            offences += [f"{rel}:{use}" for use in private_uses(path.read_text())]
    assert offences == [], "make these names public (or keep them in their module):\n" + \
        "\n".join(offences)


def test_the_check_finds_both_forms() -> None:
    source = ("from worker.providers.local import _wait_for, start_xvfb\n"
              "from coda_app.embedded import common\n"
              "import trainer.grpo.losses as losses\n"
              "common._package_dir('x', 'y')\nlosses._x\nstart_xvfb._y\n"
              "from os import _exit\nself._private\n")
    assert private_uses(source) == [
        "1: from worker.providers.local import _wait_for",
        "4: coda_app.embedded.common._package_dir",
        "5: trainer.grpo.losses._x",
        "6: worker.providers.local.start_xvfb._y",
    ]
