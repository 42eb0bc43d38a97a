"""Which tasks of a folder can run with a real verdict on a provider: per application and in
total, how many load, how many have every setup step and checker implemented, and how many can
run here with a checker's verdict (the application installed, its state readable), with the
reason for each one that cannot.

The local image's readable state (see ``worker.tasks.adapters``): TeXstudio's files and
``/tex/check``; KAlgebra's accessibility tree, its console, its pixels and ``calgebra``;
GRASS GIS's GUI state through the project's reader inside the GUI and its stand-in data sets,
except tasks whose expected values are facts of ScienceBoard's real data sets
(:func:`worker.tasks.adapters.grass.checkers.data_blocker`); ChimeraX is the project's build
from RBVI's sources (``scripts/chimerax.sh``), its tasks counted but for those this build or
the network keeps from a verdict (:data:`worker.tasks.adapters.chimerax.BLOCKERS`); Lean and
the other applications need ScienceBoard's images (Lean needs their Lean project); Celestia
is ScienceBoard's fork built from source by ``scripts/celestia.sh``, its answer tasks counted
where this build's data gives the expected answer
(:func:`worker.tasks.adapters.celestia.adapter.data_blocker`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coda.contracts.coverage import AppCoverage, CoverageReport
from coda.tasks import TaskFormat, TaskSpec, load_task_file
from worker.providers.image import SCIENCEBOARD_IMAGE, grassdata
from worker.providers.image import celestia as celestia_build
from worker.providers.image import chimerax as chimerax_build
from worker.tasks.adapters import app_checker, app_step
from worker.tasks.adapters.celestia.adapter import data_blocker as celestia_data_blocker
from worker.tasks.adapters.chimerax import blocker as chimerax_blocker
from worker.tasks.adapters.grass.adapter import GRASS
from worker.tasks.adapters.grass.checkers import data_blocker
from worker.tasks.adapters.grass.steps import FALLBACK_TERMINAL, TERMINAL
from worker.tasks.checkers import GENERIC_CHECKERS
from worker.tasks.expr import UnsafeExpression, compile_lambda
from worker.tasks.setup import OSWORLD_STEPS, SCIENCEBOARD_STEPS

BUILTIN_CHECKERS = frozenset({"stop", "osworld"})
# what each application needs on this host for a real verdict on the local provider
LOCAL_NEEDS: dict[str, tuple[str, ...]] = {
    "kalgebra": ("kalgebra", "calgebra", "dbus-daemon", "/usr/bin/python3"),
    "texstudio": ("texstudio", "pdflatex", "bibtex"),
    "grassgis": ("grass", "xterm", "/usr/bin/python3"),
    "celestia": ("wmctrl",),
    "chimerax": (),
}
LOCAL_ABSENT: dict[str, str] = {
    "lean": "Lean tasks need ScienceBoard's Lean project (their image)",
}


@dataclass
class _Counter:
    apps: dict[str, AppCoverage] = field(default_factory=dict)

    def app(self, name: str) -> AppCoverage:
        return self.apps.setdefault(name.lower(), AppCoverage(app=name))


EXPRESSION_FIELDS = ("key", "pred", "find", "value")


def refused_expressions(item: dict[str, Any]) -> list[str]:
    """Why each lambda of a checker item that the safe subset refuses cannot run (such a check
    is always undecided, so its task has no real verdict; :mod:`worker.tasks.expr`)."""
    out = []
    for name in EXPRESSION_FIELDS:
        source = item.get(name)
        if isinstance(source, str) and source.strip().startswith("lambda"):
            try:
                compile_lambda(source)
            except UnsafeExpression as exc:
                out.append(f"its {name!r} ({str(exc).split(' in ')[0][:60]})")
    return out


def missing_pieces(task: TaskSpec) -> list[str]:
    """Setup steps and checkers of ``task`` this project does not implement, and checker
    expressions it refuses to run."""
    out = []
    for step in task.setup:
        known = (OSWORLD_STEPS.get(step.func) if task.source.format is TaskFormat.OSWORLD
                 else app_step(task.app, step.func) or SCIENCEBOARD_STEPS.get(step.func))
        if known is None:
            out.append(f"setup step {step.func!r}")
    for ev in task.evaluators:
        kind = ev.model_dump().get("type", "")
        if (kind not in BUILTIN_CHECKERS and app_checker(task.app, kind) is None
                and kind not in GENERIC_CHECKERS):
            out.append(f"checker {kind!r}")
        out += [f"checker {kind!r} expression {why}" for why in refused_expressions(
            ev.model_dump())]
    return out


def _grass_blocker(task: TaskSpec) -> str | None:
    if not grassdata.is_built(SCIENCEBOARD_IMAGE.grassdata or grassdata.default_dest()):
        return ("GRASS GIS's stand-in data sets are not built here, or are stale (built by "
                "another grassdata.py): run scripts/desktop-deps.sh")
    return data_blocker(task)


def _celestia_blocker(task: TaskSpec) -> str | None:
    if not celestia_build.is_built():
        return f"Celestia is not built here: {celestia_build.BUILD_HINT}"
    return celestia_data_blocker(task)


def _chimerax_blocker(task: TaskSpec) -> str | None:
    if not chimerax_build.is_built():
        return f"ChimeraX is not built here: {chimerax_build.BUILD_HINT}"
    return chimerax_blocker(task.id)


TASK_RULES: dict[str, Callable[[TaskSpec], str | None]] = {"grassgis": _grass_blocker,
                                                         "celestia": _celestia_blocker,
                                                         "chimerax": _chimerax_blocker}


def _missing_programs(app: str, which: Callable[[str], str | None]) -> list[str]:
    return [p for p in LOCAL_NEEDS.get(app, ()) if which(p) is None and not Path(p).exists()]


def launched_programs(task: TaskSpec) -> list[str]:
    """The programs the task's ``launch`` steps start on a local slot (the image's command
    rewrites applied, leading ``VAR=value`` assignments skipped)."""
    out = []
    for step in task.setup:
        command = (step.model_extra or {}).get("command")
        if step.func != "launch" or not isinstance(command, str):
            continue
        for old, new in SCIENCEBOARD_IMAGE.command_rewrites:
            command = command.replace(old, new)
        if task.app.lower() == GRASS.name.lower():  # its launch step's terminal fallback
            command = command.replace(TERMINAL, FALLBACK_TERMINAL)
        words = [w for w in command.split() if "=" not in w.split("/")[0]]
        if words:
            out.append(words[0])
    return out


def local_blocker(task: TaskSpec, which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why ``task`` cannot get a real verdict on the local provider (None: it can)."""
    app = task.app.lower()
    if app in LOCAL_ABSENT:
        return LOCAL_ABSENT[app]
    if app not in LOCAL_NEEDS:
        return f"{task.app} is not on the local image"
    missing = _missing_programs(app, which)
    if missing:
        return f"not installed here: {', '.join(missing)}"
    if any(s.func.startswith("chimerax_") for s in task.setup):
        return "its setup needs ChimeraX (not in Debian)"
    task_rule = TASK_RULES.get(app)
    reason = task_rule(task) if task_rule is not None else None
    if reason is not None:
        return reason
    for program in launched_programs(task):
        if which(program) is None:
            return f"its setup launches {program}, which is not on the local image"
    return None


def coverage(folder: Path, provider: str = "local",
             which: Callable[[str], str | None] = shutil.which) -> CoverageReport:
    """The report for every ``*.json`` task file under ``folder`` (the application is the task's
    own, or the file's parent folder when it does not load)."""
    counter = _Counter()
    for path in sorted(folder.rglob("*.json")):
        name = str(path.relative_to(folder).with_suffix(""))
        try:
            task = load_task_file(path)
        except (ValueError, OSError) as exc:  # a task that does not load: the reason is kept
            entry = counter.app(path.parent.name)
            entry.tasks += 1
            entry.reasons.setdefault(f"does not load: {str(exc).splitlines()[0][:80]}",
                                     []).append(name)
            continue
        entry = counter.app(task.app)
        entry.tasks += 1
        entry.loaded += 1
        missing = missing_pieces(task)
        if missing:
            entry.reasons.setdefault(f"not implemented: {', '.join(missing)}", []).append(name)
            continue
        entry.implemented += 1
        blocker = local_blocker(task, which) if provider == "local" else (
            f"provider {provider!r} is not assessed here")
        if blocker is not None:
            entry.reasons.setdefault(blocker, []).append(name)
            continue
        entry.runnable += 1
    apps = sorted(counter.apps.values(), key=lambda a: a.app.lower())
    total = AppCoverage(app="total")
    for a in apps:
        total.tasks += a.tasks
        total.loaded += a.loaded
        total.implemented += a.implemented
        total.runnable += a.runnable
        for reason, names in a.reasons.items():
            total.reasons.setdefault(reason, []).extend(names)
    return CoverageReport(provider=provider, folder=str(folder), apps=apps, total=total)
