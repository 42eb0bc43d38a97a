"""The KAlgebra adapter (ScienceBoard ``sci/KAlgebra``): steps ``launch``, ``tab``, ``func_2d``,
``func_3d``; checkers ``val``, ``var``, ``eqn``, answered from one of two sources:

* ScienceBoard's patched KAlgebra (their images): its state API (:mod:`.patched`);
* any other KAlgebra (Debian's, on the local image): its accessibility tree and ``calgebra``
  (:mod:`.desktop`), chosen when the task's ``launch`` starts a KAlgebra other than the
  patched ``/app/bin/kalgebra``.

Checker meaning (ScienceBoard ``sci/KAlgebra/task.py``): ``val`` passes when the variable's
value (its text read as a number; on Debian's KAlgebra an exact value the panel shows as an
expression is calculated by Analitza first) is within 1e-6 of the expected number, a missing or
non-number variable fails; ``var`` compares the variable's text exactly (``#UNDEF``: the
variable must not exist; on Debian's KAlgebra the text of the value Analitza calculates from
an expression the panel shows, as ScienceBoard's patched KAlgebra reports the value); ``eqn``
passes when one plot answers every expected key (see :mod:`.points`), ``#SIZE`` compares the
number of 2D plots.
"""

from __future__ import annotations

from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus
from coda.tasks import SetupStep
from worker.tasks.adapters.base import AppAdapter
from worker.tasks.adapters.kalgebra import desktop, patched
from worker.tasks.context import StepError, TaskContext, params
from worker.tasks.launch import launch_step

VAL_TOLERANCE = 1e-6


def _desktop(ctx: TaskContext) -> bool:
    return desktop.bus_address(ctx) is not None


def step_launch(ctx: TaskContext, step: SetupStep) -> str | None:
    if desktop.wants_desktop_mode(ctx, str(params(step).get("command", ""))):
        return desktop.launch(ctx, step, launch_step)
    return launch_step(ctx, step)


def step_tab(ctx: TaskContext, step: SetupStep) -> str:
    if not _desktop(ctx):
        return patched.step_tab(ctx, step)
    index = int(params(step)["index"])
    if not 0 <= index < 4:
        raise StepError(patched.StepStatus.FAILED, f"tab index {index} out of range 0..3")
    return desktop.step_tab(ctx, index)


def step_func_2d(ctx: TaskContext, step: SetupStep) -> str:
    if not _desktop(ctx):
        return patched.step_func_2d(ctx, step)
    return desktop.step_func_2d(ctx, str(params(step)["expr"]))


def step_func_3d(ctx: TaskContext, step: SetupStep) -> str:
    if not _desktop(ctx):
        return patched.step_func_3d(ctx, step)
    return desktop.step_func_3d(ctx, str(params(step)["expr"]))


def _result(kind: str, ok: bool, detail: str) -> CheckResult:
    return CheckResult(type=kind, status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=detail)


def _variables(ctx: TaskContext) -> dict[str, Any]:
    return desktop.variables(ctx) if _desktop(ctx) else patched.variables(ctx)


def check_val(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    variables = _variables(ctx)
    key = item["key"]
    if key not in variables:
        return _result("val", False, f"variable {key} is not defined")
    try:
        ok = abs(_number(ctx, variables[key]) - float(item["value"])) <= VAL_TOLERANCE
    except (TypeError, ValueError):
        ok = False
    return _result("val", ok, f"{key} = {variables[key]} (expected {item['value']})")


def _number(ctx: TaskContext, value: Any) -> float:
    """The variable's value as a number: its text, or (Debian's KAlgebra shows an exact value
    as an expression) what Analitza calculates from that expression."""
    try:
        return float(value)
    except ValueError:
        if not _desktop(ctx):
            raise
        return desktop.value_of(ctx, str(value))


def check_var(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    key, value = item["key"], item["value"]
    variables = _variables(ctx)
    if value == "#UNDEF":
        return _result("var", key not in variables, f"{key} must be undefined")
    text = desktop.var_text(ctx, key, str(value)) if _desktop(ctx) else variables.get(key)
    return _result("var", text == value, f"{key} = {text!r}")


def _curves(ctx: TaskContext, pts: list[list[Any]], dim: int, wanted: dict[str, Any]) -> list[Any]:
    if not _desktop(ctx):
        return patched.curves(ctx, pts, dim)
    if dim == 3:
        return [desktop.plot_3d(ctx, pts)]
    return desktop.plots_2d(ctx, pts, wanted)


def check_eqn(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    if item["key"] == "#SIZE":
        n = len(_curves(ctx, [], 2, {}))
        return _result("eqn", n == item["value"], f"{n} curves (expected {item['value']})")
    pts: list[list[Any]] = item["key"]
    wanted: dict[str, Any] = item["value"]
    curves = _curves(ctx, pts, len(pts[0]) if pts else 2, wanted)
    ok = any(all(k in c and c[k] == v for k, v in wanted.items()) for c in curves)
    return _result("eqn", ok, f"{len(curves)} curves checked against {len(wanted)} keys")


KALGEBRA = AppAdapter(
    name="KAlgebra",
    steps={"launch": step_launch, "tab": step_tab, "func_2d": step_func_2d,
           "func_3d": step_func_3d},
    checkers={"val": check_val, "var": check_var, "eqn": check_eqn},
)
