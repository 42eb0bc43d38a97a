"""Application adapters by name (case-insensitive), and the step/checker lookup rules:
the task's own application first, then ``<app>_<name>`` steps of another application
(ScienceBoard's TeXstudio tasks call ``chimerax_open``), then the generic ones."""

from __future__ import annotations

from worker.tasks.adapters.base import AppAdapter, CheckHandler, StepHandler
from worker.tasks.adapters.celestia.adapter import CELESTIA
from worker.tasks.adapters.chimerax import CHIMERAX
from worker.tasks.adapters.grass.adapter import GRASS
from worker.tasks.adapters.kalgebra.adapter import KALGEBRA
from worker.tasks.adapters.lean import LEAN
from worker.tasks.adapters.texstudio import TEXSTUDIO

ADAPTERS: dict[str, AppAdapter] = {a.name.lower(): a for a in (CELESTIA, CHIMERAX, GRASS,
                                                                 KALGEBRA, LEAN, TEXSTUDIO)}


def adapter_for(app: str) -> AppAdapter | None:
    return ADAPTERS.get(app.lower())


def app_step(app: str, func: str) -> StepHandler | None:
    own = adapter_for(app)
    if own is not None and func in own.steps:
        return own.steps[func]
    prefix, _, name = func.partition("_")
    other = ADAPTERS.get(prefix.lower())
    if other is not None and name in other.steps:
        return other.steps[name]
    return None


def app_checker(app: str, kind: str) -> CheckHandler | None:
    own = adapter_for(app)
    return own.checkers.get(kind) if own is not None else None


__all__ = ["ADAPTERS", "AppAdapter", "adapter_for", "app_checker", "app_step"]
