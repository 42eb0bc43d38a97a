"""TeXstudio (ScienceBoard ``sci/TeXstudio``): checkers ``file`` (the touched text with
``source`` replaced by ``target`` must equal the file now), ``include`` (a regex found in the
file) and ``compile`` (``/tex/check``: pdflatex, plus bibtex when the task touched a .bib)."""

from __future__ import annotations

import re
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus
from worker.providers.client import GuestError
from worker.tasks.adapters.base import AppAdapter
from worker.tasks.context import CheckError, TaskContext


def touched_text(ctx: TaskContext, path: str) -> str:
    """The text the task's ``touch`` step wrote to ``path`` (ScienceBoard's reverse_touch)."""
    for step in ctx.task.setup:
        extra = step.model_extra or {}
        if step.func == "touch" and extra.get("path") == path:
            return str(extra.get("text", ""))
    raise CheckError(CheckStatus.ERROR, f"no touch step wrote {path}")


def read_text(ctx: TaskContext, path: str) -> str | None:
    data = ctx.guest.read_file(ctx.rw(path))
    return None if data is None else data.decode("utf-8", "replace")


def check_file(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    expected = touched_text(ctx, item["path"])
    if "source" in item and "target" in item:
        expected = expected.replace(item["source"], item["target"])
    actual = read_text(ctx, item["path"])
    if actual is None:
        return CheckResult(type="file", status=CheckStatus.FAIL, detail=f"{item['path']} missing")
    if actual == expected:
        return CheckResult(type="file", status=CheckStatus.PASS, detail=item["path"])
    return CheckResult(type="file", status=CheckStatus.FAIL,
                       detail=f"{item['path']} differs from the expected edit")


def check_include(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    actual = read_text(ctx, item["path"])
    found = actual is not None and re.search(item["pattern"], actual) is not None
    return CheckResult(type="include", status=CheckStatus.PASS if found else CheckStatus.FAIL,
                       detail=f"/{item['pattern']}/ in {item['path']}")


def check_compile(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    bibtex = any(s.func == "touch" and str((s.model_extra or {}).get("path", "")).endswith(".bib")
                 for s in ctx.task.setup)
    try:
        reply = ctx.guest.check("/tex/check", {
            "path": ctx.rw(item["path"]), "file": item["file"], "bibtex": bibtex}, timeout=600)
    except GuestError as exc:
        status = CheckStatus.UNAVAILABLE if exc.status in (404, 501, 503) else CheckStatus.ERROR
        raise CheckError(status, f"/tex/check: {exc}") from exc
    return CheckResult(type="compile",
                       status=CheckStatus.PASS if reply.passed else CheckStatus.FAIL,
                       detail=reply.detail or f"{item['file']}.tex")


TEXSTUDIO = AppAdapter(
    name="TeXstudio",
    checkers={"file": check_file, "include": check_include, "compile": check_compile},
)
