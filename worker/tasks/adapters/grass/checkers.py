"""GRASS GIS's checkers (``info``, ``db``), answered by the state reader inside the GUI
(:mod:`.gui`), and which tasks the stand-in data sets cannot decide (:func:`data_blocker`):

* ``info``: ``key`` (a lambda over the state dump) and ``pred`` (default ``==``) against
  ``value``; ``db``: the same over a GRASS module's output run in the GUI's session
  (``format=json`` output parsed; 8.2's ``v.db.select`` lacks 8.4's ``info.columns``, added here
  from ``v.info -c``, as 8.4 names the types). As in ScienceBoard, an error inside a checker's
  expressions (a missing layer, an unset option) fails the check; a GUI that cannot be read
  makes it *unavailable*. With the worker's ``CODA_WORKER_CHECKER_ERRATA`` on, an ``info`` item
  known to be wrong is judged by its corrected check (:mod:`.errata`).
"""

from __future__ import annotations

import json
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, GrassOp
from coda.tasks import TaskSpec
from worker.providers.client import GuestError
from worker.providers.image.grassdata import FACTS
from worker.tasks.adapters.base import CheckHandler
from worker.tasks.adapters.grass import errata, gui, reads
from worker.tasks.adapters.grass.steps import STEP_TIMEOUT_S
from worker.tasks.context import CheckError, TaskContext
from worker.tasks.expr import UnsafeExpression, compile_lambda

DUMP_KEY = "grass_dump"
# a Python error inside a task's expressions: the check fails (ScienceBoard: error -> False)
EXPRESSION_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError,
                     ZeroDivisionError)


def _lambda(source: Any) -> Any:
    try:
        return compile_lambda(str(source))
    except UnsafeExpression as exc:
        raise CheckError(CheckStatus.ERROR, str(exc)) from exc


def _readable(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except gui.Unreadable as exc:
        raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc
    except (gui.GuiError, GuestError) as exc:
        raise CheckError(CheckStatus.ERROR, str(exc)) from exc


def state_dump(ctx: TaskContext) -> dict[str, Any]:
    """The GUI's state, read once per evaluation."""
    if DUMP_KEY not in ctx.scratch:
        ctx.scratch[DUMP_KEY] = _readable(gui.dump, ctx)
    state: dict[str, Any] = ctx.scratch[DUMP_KEY]
    return state


def judge(kind: str, item: dict[str, Any], data: Any) -> CheckResult:
    """ScienceBoard's ``pred(key(data), value)``, ``pred`` defaulting to equality; the detail
    names what ``pred`` read of ``key(data)`` (:mod:`.reads`)."""
    key = _lambda(item["key"])
    pred = _lambda(item["pred"]) if "pred" in item else (lambda a, b: a == b)
    try:
        got = key(data)
        ok, read = reads.compared(pred, got, item["value"])
    except EXPRESSION_ERRORS as exc:
        return CheckResult(type=kind, status=CheckStatus.FAIL,
                           detail=f"{type(exc).__name__} in the check: {exc}")
    return CheckResult(type=kind, status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=f"{read} against {reads.shown(item['value'], 100)}")


def check_info(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    """ScienceBoard's check; with the worker's errata on, a corrected one where the task's
    check is known to be wrong (:mod:`.errata`)."""
    result = judge("info", item, state_dump(ctx))
    erratum = errata.for_item(item) if ctx.errata else None
    return result if erratum is None else errata.apply(erratum, "info", state_dump(ctx), result)


COLUMN_NUMBER_TYPES = ("INTEGER", "DOUBLE PRECISION", "REAL", "SMALLINT", "NUMERIC", "SERIAL")


def columns(ctx: TaskContext, vector: str) -> list[dict[str, Any]]:
    """The attribute columns of ``vector`` as 8.4's ``v.db.select format=json`` lists them."""
    reply = _readable(gui.call, ctx, GrassOp.GCMD, cmd="v.info",
                      kwargs={"flags": "c", "map": vector})
    if reply.get("returncode") != 0:
        raise CheckError(CheckStatus.ERROR, f"v.info -c {vector}: {reply.get('stderr')}")
    out = []
    for line in str(reply.get("stdout", "")).splitlines():
        sql_type, sep, name = line.partition("|")
        if sep:
            out.append({"name": name, "sql_type": sql_type,
                        "is_number": sql_type.upper() in COLUMN_NUMBER_TYPES})
    return out


def db_output(ctx: TaskContext, cmd: str, kwargs: dict[str, Any]) -> Any:
    reply = _readable(gui.call, ctx, GrassOp.GCMD, cmd=cmd, kwargs=kwargs, timeout_s=STEP_TIMEOUT_S)
    stdout = str(reply.get("stdout", ""))
    if reply.get("returncode") != 0:
        return None if kwargs.get("format") == "json" else stdout
    if kwargs.get("format") != "json":
        return stdout
    try:
        data = json.loads(stdout)
    except ValueError as exc:
        raise CheckError(CheckStatus.ERROR, f"{cmd}: output is not JSON: {exc}") from exc
    if cmd == "v.db.select" and isinstance(data, dict) and "info" not in data:
        data["info"] = {"columns": columns(ctx, str(kwargs["map"]))}
    return data


def check_db(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    kwargs = dict(item.get("kwargs") or {})
    return judge("db", item, db_output(ctx, str(item["cmd"]), kwargs))


# expected values that are facts of ScienceBoard's real data sets, which no stand-in holds
REAL_DATA_VALUES = {
    "n: 263975": "its checker expects r.univar's cell count of the real Piemonte lake raster "
                 "(n: 263975), a fact of ScienceBoard's data set the stand-in does not hold",
    "Ubuntu:Bold": "it wants the font Ubuntu:Bold, which Debian bookworm does not package "
                   "(fonts-ubuntu is not in main): GRASS's font list cannot offer it",
}


def data_blocker(task: TaskSpec) -> str | None:
    """Why the stand-in data sets cannot give ``task`` a real verdict (None: they can): an
    answer the stand-in is not built to hold (:data:`FACTS`), or an expected value of the real
    data (:data:`REAL_DATA_VALUES`)."""
    for ev in task.evaluators:
        item = ev.model_dump()
        value = item.get("value")
        if item.get("type") == "stop" and value == "ANS":
            answer = " ".join(str(a) for a in item.get("args", []))
            if not any(phrase in task.instruction and answer == fact for phrase, fact in FACTS):
                return ("its answer is a fact of ScienceBoard's real data set, which the "
                        "stand-in does not hold")
        if isinstance(value, str) and value in REAL_DATA_VALUES:
            return REAL_DATA_VALUES[value]
    return None


CHECKERS: dict[str, CheckHandler] = {"info": check_info, "db": check_db}
