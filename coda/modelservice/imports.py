"""A missing optional package (an extra not installed) versus a real import error."""

from __future__ import annotations

import importlib.util

OWN_PACKAGES = frozenset({"coda", "coda_app", "master", "worker", "planner_service",
                          "executor_service", "judge_service", "trainer", "benchmarks", "tests"})


def missing_package(exc: ImportError) -> str | None:
    """The top-level package whose absence caused ``exc``, when that is what happened (so an
    extra is not installed); ``None`` for any other import error, which must be reported as
    it is (a bug, a broken installation)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".", 1)[0]
    if top in OWN_PACKAGES:
        return None
    try:
        present = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        present = False
    return None if present else top
