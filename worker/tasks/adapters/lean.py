"""Lean (ScienceBoard ``sci/Lean``, VM variant): steps ``import``, ``open``, ``def`` and
``query`` build a header and append it with the theorem (its proof replaced by ``sorry``) to the
image's Lean project file through the guest's ``/append``; the ``placeholder`` checker asks the
guest's ``/lean/check`` whether the file still holds the theorem and builds without ``sorry``.
A desktop without ScienceBoard's Lean project reports *unavailable*."""

from __future__ import annotations

from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, StepStatus
from coda.tasks import SetupStep
from worker.providers.client import GuestError
from worker.tasks.adapters.base import AppAdapter
from worker.tasks.context import CheckError, StepError, TaskContext, params

BASIC_LEAN = "/home/user/sci/Sci/Basic.lean"


def _buffer(ctx: TaskContext) -> list[str]:
    buf: list[str] = ctx.scratch.setdefault("lean_buffer", [])
    return buf


def _blank_line(buf: list[str]) -> None:
    if not buf or buf[-1] != "":
        buf.append("")


def step_import(ctx: TaskContext, step: SetupStep) -> str:
    libs = [lib for lib in params(step)["libs"] if lib != "Mathlib"]  # the image loads Mathlib
    if libs:
        buf = _buffer(ctx)
        _blank_line(buf)
        buf.append(f"import {' '.join(libs)}")
    return "header"


def step_open(ctx: TaskContext, step: SetupStep) -> str:
    buf = _buffer(ctx)
    _blank_line(buf)
    buf.append(f"open {' '.join(params(step)['libs'])}")
    _blank_line(buf)
    return "header"


def step_def(ctx: TaskContext, step: SetupStep) -> str:
    _buffer(ctx).append(str(params(step)["expr"]))
    return "header"


def theorem_header(ctx: TaskContext) -> str:
    """The query without its trailing ``sorry`` (ScienceBoard: ``expr[:-6]``)."""
    queries = [s for s in ctx.task.setup if s.func == "query"]
    if len(queries) != 1:
        raise CheckError(CheckStatus.ERROR, f"a Lean task needs one query, found {len(queries)}")
    expr = str((queries[0].model_extra or {}).get("expr", ""))
    if not expr.endswith("by sorry"):
        raise CheckError(CheckStatus.ERROR, "the Lean query must end with 'by sorry'")
    return expr[:-6]


def step_query(ctx: TaskContext, step: SetupStep) -> str:
    path = ctx.rw(BASIC_LEAN)
    if ctx.guest.read_file(path) is None:
        raise StepError(StepStatus.UNAVAILABLE, f"ScienceBoard's Lean project is not on this "
                                                f"desktop ({path} missing)")
    try:
        header = theorem_header(ctx)
    except CheckError as exc:
        raise StepError(StepStatus.FAILED, exc.detail) from exc
    buf = _buffer(ctx)
    _blank_line(buf)
    buf.append(header + "\n  sorry\n")
    ctx.guest.append(path, "\n".join(buf))
    return f"appended to {path}"


def check_placeholder(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    try:
        reply = ctx.guest.check("/lean/check", {"header": theorem_header(ctx)}, timeout=900)
    except GuestError as exc:
        status = CheckStatus.UNAVAILABLE if exc.status in (404, 501, 503) else CheckStatus.ERROR
        raise CheckError(status, f"/lean/check: {exc}") from exc
    return CheckResult(type="placeholder",
                       status=CheckStatus.PASS if reply.passed else CheckStatus.FAIL,
                       detail=reply.detail or "lake build")


LEAN = AppAdapter(
    name="Lean",
    steps={"import": step_import, "open": step_open, "def": step_def, "query": step_query},
    checkers={"placeholder": check_placeholder},
)
