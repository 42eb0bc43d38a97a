"""Log event names have one style: ``area.event_name`` (lower-case words joined by ``_``, at
least one dot), so a log search or a dashboard filter can rely on them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [p for p in ROOT.iterdir() if (p / "__init__.py").exists() and p.name != "tests"]
PACKAGES.append(ROOT / "benchmarks")
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
STYLE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")


def events() -> list[tuple[str, str]]:
    """(file:line, event) of every ``log.<level>("...")`` call with a literal event name."""
    found = []
    for package in PACKAGES:
        for path in package.rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in LEVELS and isinstance(node.func.value, ast.Name)
                        and node.func.value.id in {"log", "logger", "_log"} and node.args
                        and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str)):
                    found.append((f"{path.relative_to(ROOT)}:{node.lineno}", node.args[0].value))
    return found


def test_every_log_event_is_area_dot_event_name() -> None:
    found = events()
    assert len(found) > 50  # the walk sees the packages
    bad = [f"{where}: {name!r}" for where, name in found if not STYLE.match(name)]
    assert not bad, "log events not in the area.event_name style:\n" + "\n".join(bad)
