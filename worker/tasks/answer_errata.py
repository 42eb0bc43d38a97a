"""Known defects of ScienceBoard's own answers (a ``stop``/``ANS`` item whose expected words are
wrong or not the only right ones), and the corrected check that gives the instruction's verdict
instead: applied only when the worker runs with ``CODA_WORKER_CHECKER_ERRATA=true`` (default
off: ScienceBoard's verdict, so results stay comparable with its paper's Table 1; the same
switch as GRASS GIS's errata, :mod:`worker.tasks.adapters.grass.errata`). Each entry names its
application, task, the task file's instruction and expected answer words (an erratum applies to
a ``stop``/``ANS`` item of a task of that application with exactly that instruction and those
words), what is wrong, the evidence and the answers the corrected check accepts. The entries
live beside their application's adapter (:mod:`worker.tasks.adapters.celestia.errata`,
:data:`worker.tasks.adapters.chimerax.ERRATA`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, EpisodeEnd
from coda.tasks import TaskSpec


@dataclass(frozen=True)
class AnswerErratum:
    app: str  # the task's application, lower case
    task: str
    instruction: str
    expected: tuple[str, ...]  # the task file's answer words (ScienceBoard's args)
    accepts: tuple[tuple[str, ...], ...]  # the answers the corrected check passes
    wrong: str
    evidence: str


def for_stop(task: TaskSpec, item: dict[str, Any],
             known: Iterable[AnswerErratum]) -> AnswerErratum | None:
    """The erratum among ``known`` for a task's ``stop``/``ANS`` item, if there is one."""
    if item.get("value") != "ANS":
        return None
    words = tuple(str(a) for a in item.get("args", []))
    return next((e for e in known if e.app == task.app.lower()
                 and e.instruction == task.instruction.strip() and e.expected == words), None)


def apply(erratum: AnswerErratum, end: EpisodeEnd, scienceboard: CheckResult) -> CheckResult:
    """The corrected answer check; the detail names the erratum, the answer and ScienceBoard's
    own verdict."""
    given = tuple((end.answer or "").split())
    ok = end.kind == "ANS" and given in erratum.accepts
    accepted = " or ".join(repr(" ".join(a)) for a in erratum.accepts)
    return CheckResult(
        type="stop", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
        detail=f"erratum {erratum.task} applied (the answer is {accepted}): the agent ended "
               f"with {end.kind} {list(given)}; ScienceBoard's check: "
               f"{scienceboard.status.value} ({scienceboard.detail})")
