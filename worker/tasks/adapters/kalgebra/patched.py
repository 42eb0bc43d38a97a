"""ScienceBoard's patched KAlgebra (its images): the state API it serves on the task's
«PORTLIKE» port: ``GET /version``, ``GET /vars``, ``POST /func/{2,3}d`` (points -> which curves
pass through them), ``POST /tab`` (index), ``POST /add/{2,3}d`` (expression). Without that API
(nothing answers) these report *unavailable*."""

from __future__ import annotations

from typing import Any

import httpx

from coda.contracts.desktop import CheckStatus, StepStatus
from coda.tasks import SetupStep
from worker.tasks.context import CheckError, StepError, TaskContext, params

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


def variables(ctx: TaskContext) -> dict[str, Any]:
    return dict(_state(ctx, "GET", "/vars"))


def curves(ctx: TaskContext, points: list[list[float]], dim: int | None = None) -> list[Any]:
    """``/func/{dim}d``: one answer per plot (the 3D route answers one object)."""
    dim = dim or (len(points[0]) if points else 2)
    result = _state(ctx, "POST", f"/func/{dim}d", json=points)
    return [result] if isinstance(result, dict) else list(result)
