"""KAlgebra (ScienceBoard ``sci/KAlgebra``): ScienceBoard's patched KAlgebra serves its state on
the task's «PORTLIKE» port: ``GET /version``, ``GET /vars``, ``POST /func/{2,3}d`` (points ->
which curves pass through them), ``POST /tab`` (index), ``POST /add/{2,3}d`` (expression).
Steps ``tab``, ``func_2d``, ``func_3d``; checkers ``val`` (a variable's value within 1e-6),
``var`` (a variable's exact text, ``#UNDEF``: absent), ``eqn`` (curves through given points;
``#SIZE``: how many curves). Debian's KAlgebra has no such API: these report *unavailable*."""

from __future__ import annotations

from typing import Any

import httpx

from coda.contracts.desktop import CheckResult, CheckStatus, StepStatus
from coda.tasks import SetupStep
from worker.tasks.adapters.base import AppAdapter, params
from worker.tasks.context import CheckError, StepError, TaskContext

TIMEOUT_S = 240.0


def _call(ctx: TaskContext, method: str, path: str, **kwargs: Any) -> httpx.Response:
    url = ctx.app_url + path
    try:
        resp = httpx.request(method, url, timeout=TIMEOUT_S, **kwargs)
    except httpx.TransportError as exc:
        raise LookupError(f"KAlgebra state API not reachable at {url} (needs ScienceBoard's "
                          f"patched KAlgebra): {exc}") from exc
    resp.raise_for_status()
    return resp


def _step(ctx: TaskContext, path: str, **kwargs: Any) -> str:
    try:
        text = _call(ctx, "POST", path, **kwargs).text
    except LookupError as exc:
        raise StepError(StepStatus.UNAVAILABLE, str(exc)) from exc
    except httpx.HTTPStatusError as exc:
        raise StepError(StepStatus.FAILED, f"KAlgebra {path}: {exc}") from exc
    if text != "OK":
        raise StepError(StepStatus.FAILED, f"KAlgebra {path} answered {text[:200]!r}")
    return f"KAlgebra {path}"


def step_tab(ctx: TaskContext, step: SetupStep) -> str:
    index = int(params(step)["index"])
    if not 0 <= index < 4:
        raise StepError(StepStatus.FAILED, f"tab index {index} out of range 0..3")
    return _step(ctx, "/tab", json=index)


def step_func_2d(ctx: TaskContext, step: SetupStep) -> str:
    return _step(ctx, "/add/2d", content=str(params(step)["expr"]))


def step_func_3d(ctx: TaskContext, step: SetupStep) -> str:
    return _step(ctx, "/add/3d", content=str(params(step)["expr"]))


def _state(ctx: TaskContext, method: str, path: str, **kwargs: Any) -> Any:
    try:
        return _call(ctx, method, path, **kwargs).json()
    except LookupError as exc:
        raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc
    except (httpx.HTTPStatusError, ValueError) as exc:
        raise CheckError(CheckStatus.ERROR, f"KAlgebra {path}: {exc}") from exc


def _result(kind: str, ok: bool, detail: str) -> CheckResult:
    return CheckResult(type=kind, status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=detail)


def check_val(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    variables = _state(ctx, "GET", "/vars")
    key = item["key"]
    if key not in variables:
        return _result("val", False, f"variable {key} is not defined")
    try:
        ok = abs(float(variables[key]) - float(item["value"])) <= 1e-6
    except (TypeError, ValueError):
        ok = False
    return _result("val", ok, f"{key} = {variables[key]} (expected {item['value']})")


def check_var(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    variables = _state(ctx, "GET", "/vars")
    key, value = item["key"], item["value"]
    if value == "#UNDEF":
        return _result("var", key not in variables, f"{key} must be undefined")
    return _result("var", variables.get(key) == value, f"{key} = {variables.get(key)!r}")


def _curves(ctx: TaskContext, points: list[list[float]], dim: int | None = None) -> list[Any]:
    dim = dim or (len(points[0]) if points else 2)
    result = _state(ctx, "POST", f"/func/{dim}d", json=points)
    return [result] if isinstance(result, dict) else list(result)


def check_eqn(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    if item["key"] == "#SIZE":
        n = len(_curves(ctx, [], dim=2))
        return _result("eqn", n == item["value"], f"{n} curves (expected {item['value']})")
    curves = _curves(ctx, item["key"])
    wanted: dict[str, Any] = item["value"]
    ok = any(all(c.get(k) == v for k, v in wanted.items()) for c in curves)
    return _result("eqn", ok, f"{len(curves)} curves checked against {len(wanted)} points")


KALGEBRA = AppAdapter(
    name="KAlgebra",
    steps={"tab": step_tab, "func_2d": step_func_2d, "func_3d": step_func_3d},
    checkers={"val": check_val, "var": check_var, "eqn": check_eqn},
)
