"""Known defects of ScienceBoard's own Celestia answers, and the corrected answers that give the
instruction's verdict instead: applied only when the worker runs with
``CODA_WORKER_CHECKER_ERRATA=true`` (default off: ScienceBoard's verdict, so results stay
comparable with its paper's Table 1; the same switch as GRASS GIS's errata,
:mod:`worker.tasks.adapters.grass.errata`). Each entry names its task, the task file's
instruction and expected answer words (an erratum applies to a ``stop``/``ANS`` item of a
Celestia task with exactly that instruction and those words), what is wrong, the evidence and
the answers the corrected check accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, EpisodeEnd
from coda.tasks import TaskSpec

APP = "celestia"


@dataclass(frozen=True)
class AnswerErratum:
    task: str
    instruction: str
    expected: tuple[str, ...]  # the task file's answer words (ScienceBoard's args)
    accepts: tuple[tuple[str, ...], ...]  # the answers the corrected check passes
    wrong: str
    evidence: str


ERRATA: tuple[AnswerErratum, ...] = (
    AnswerErratum(
        "D-02", "Answer the question: on which day of December will the last lunar eclipse "
        "occur on Earth in 2056?", ("21",), (("21",), ("22",)),
        "the eclipse spans December 21-22 UT (it begins on the 21st and ends on the 22nd), so "
        "the question has two right answers; only \"21\" passes",
        "issue 38 (point 7) found the eclipse across the UT midnight of Dec 21-22 in this "
        "Celestia; independently, Meeus's full-moon terms put December 2056's full moon, near "
        "its node, at about 01:36 UT on the 22nd, so the penumbral phase begins on the 21st "
        "(tests/worker/test_celestia_errata.py computes it)"),
    AnswerErratum(
        "D-03", "What is the difference value in viewing angle between the Sun and the Earth "
        "when viewed from Mars on May 28, 2150? Submit your answer with one decimal place.",
        ("30.5",), (("33.0",), ("33.1",)),
        "the Sun-Earth angle seen from Mars on 2150-05-28 is 33.0 degrees (33.00 at 0h UT, "
        "33.12 at the day's end), not 30.5",
        "issue 38 (point 7) read 33.0 degrees in this Celestia on 2150-05-28; independently, "
        "JPL's Keplerian elements for approximate positions of the planets (Standish, Table 1) "
        "give 33.00 at 0h UT and 33.12 at 24h UT (tests/worker/test_celestia_errata.py "
        "computes it)"),
)


def for_stop(task: TaskSpec, item: dict[str, Any]) -> AnswerErratum | None:
    """The erratum for a Celestia task's ``stop``/``ANS`` item, if one is known."""
    if task.app.lower() != APP or item.get("value") != "ANS":
        return None
    words = tuple(str(a) for a in item.get("args", []))
    return next((e for e in ERRATA if e.instruction == task.instruction.strip()
                 and e.expected == words), None)


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
