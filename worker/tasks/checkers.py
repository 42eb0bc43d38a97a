"""Run a task's own checkers on the final state of a desktop.

ScienceBoard semantics (``sci/base/task.py``): every ``stop`` item must match how the agent
ended (``DONE`` / ``FAIL`` / ``ANS`` with exactly the task's answer words); the other items are
the application's checkers, all of which must pass. With the worker's
``CODA_WORKER_CHECKER_ERRATA`` on, a Celestia answer known to be wrong is judged by its corrected
answers (:mod:`worker.tasks.adapters.celestia.errata`). OSWorld evaluators go to
:mod:`worker.tasks.osworld_eval`. The verdict: success when every checker passed, failure when
one failed, *undecided* when one could not decide (unsupported, unavailable, error), and
*no_checker* for a task without checkers (the judge decides).
"""

from __future__ import annotations

from typing import Any

from coda.actions import Action, Answer, Done, Fail
from coda.contracts.desktop import (
    CheckOutcome,
    CheckResult,
    CheckStatus,
    CheckVerdict,
    DesktopBroken,
    EpisodeEnd,
)
from worker.providers.client import GuestError
from worker.tasks import answer_errata
from worker.tasks.adapters import app_checker, chimerax
from worker.tasks.adapters.base import CheckHandler
from worker.tasks.adapters.celestia import errata as celestia_errata
from worker.tasks.adapters.texstudio import TEXSTUDIO
from worker.tasks.context import CheckError, TaskContext
from worker.tasks.osworld_eval import run_osworld

GENERIC_CHECKERS: dict[str, CheckHandler] = dict(TEXSTUDIO.checkers)
ANSWER_ERRATA = (*celestia_errata.ERRATA, *chimerax.ERRATA)
"""Every known defective answer, each applied to its own application's tasks."""


def episode_end(last: Action | None) -> EpisodeEnd:
    """How an episode ended, from its last action (None or any other action: out of steps)."""
    if isinstance(last, Done):
        return EpisodeEnd(kind="DONE")
    if isinstance(last, Fail):
        return EpisodeEnd(kind="FAIL")
    if isinstance(last, Answer):
        return EpisodeEnd(kind="ANS", answer=last.text)
    return EpisodeEnd(kind="TIMEOUT")


def check_stop(item: dict[str, Any], end: EpisodeEnd) -> CheckResult:
    """ScienceBoard's stop rule: the stop type matches; for ANS, the answer words equal
    ``args`` exactly."""
    want = str(item.get("value", ""))
    if want != end.kind:
        return CheckResult(type="stop", status=CheckStatus.FAIL,
                           detail=f"expected {want}, the agent ended with {end.kind}")
    if want == "ANS":
        given = (end.answer or "").split()
        expected = [str(a) for a in item.get("args", [])]
        if given != expected:
            return CheckResult(type="stop", status=CheckStatus.FAIL,
                               detail=f"answer {given} != {expected}")
    return CheckResult(type="stop", status=CheckStatus.PASS, detail=want)


def run_item(ctx: TaskContext, item: dict[str, Any], end: EpisodeEnd) -> CheckResult:
    kind = str(item.get("type", ""))
    if kind == "stop":
        result = check_stop(item, end)
        erratum = answer_errata.for_stop(ctx.task, item, ANSWER_ERRATA) if ctx.errata else None
        return result if erratum is None else answer_errata.apply(erratum, end, result)
    if kind == "osworld":
        return run_osworld(ctx, item, end)
    handler = app_checker(ctx.task.app, kind) or GENERIC_CHECKERS.get(kind)
    if handler is None:
        return CheckResult(type=kind, status=CheckStatus.UNSUPPORTED,
                           detail=f"checker type {kind!r} is not supported for {ctx.task.app}")
    try:
        return handler(ctx, item)
    except CheckError as exc:
        return CheckResult(type=kind, status=exc.status, detail=exc.detail)
    except KeyError as exc:
        return CheckResult(type=kind, status=CheckStatus.ERROR,
                           detail=f"field {exc.args[0]!r} is missing")
    except (GuestError, DesktopBroken, TypeError, ValueError) as exc:
        return CheckResult(type=kind, status=CheckStatus.ERROR, detail=str(exc))


def combine(results: list[CheckResult]) -> CheckVerdict:
    if not results:
        return CheckVerdict.NO_CHECKER
    if any(r.status is CheckStatus.FAIL for r in results):
        return CheckVerdict.FAILURE
    if all(r.status is CheckStatus.PASS for r in results):
        return CheckVerdict.SUCCESS
    return CheckVerdict.UNDECIDED


def run_checkers(ctx: TaskContext, end: EpisodeEnd) -> CheckOutcome:
    """Every checker of the task (stop items first, as ScienceBoard evaluates them)."""
    items = [e.model_dump() for e in ctx.task.evaluators]
    items.sort(key=lambda i: i.get("type") != "stop")
    # fresh per evaluation
    for dump in ("celestia_dump", "chimerax_states", "grass_dump", "kalgebra_state"):
        ctx.scratch.pop(dump, None)
    results = [run_item(ctx, item, end) for item in items]
    return CheckOutcome(verdict=combine(results), results=results)
