"""Run a task's setup on a desktop.

ScienceBoard ``initialize`` items (generic: ``launch`` with «PORTLIKE» and ``wait``,
``execute``, ``touch``, ``opt``, ``download``; app-specific ones through the app adapters) and
OSWorld ``config`` entries (``launch``, ``execute``/``command``, ``sleep``, ``open``,
``upload_file``, ``download``, ``activate_window``, ``close_window``). A step type the project
does not know ends setup with an *unsupported* result naming it. As ScienceBoard does, setup
stops at the first step that does not succeed, and a command step succeeds when the guest ran
it (whatever its exit code).

``launch`` probes instead of sleeping where the guest can list windows (the project's agent):
it returns when a new window appears, or fails after ``launch_timeout_s``. Against OSWorld's
server, which cannot list windows, it sleeps the step's ``wait`` seconds as ScienceBoard does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from coda.contracts.desktop import CommandReply, SetupReport, SetupStepResult, StepStatus
from coda.tasks import SetupStep, TaskFormat
from worker.providers.client import GuestError
from worker.tasks.adapters import app_step
from worker.tasks.adapters.base import StepHandler
from worker.tasks.context import StepError, TaskContext, params
from worker.tasks.launch import MAX_SLEEP_S, launch_step


def _execute(ctx: TaskContext, step: SetupStep) -> str:
    p = params(step)
    if not p.get("command"):
        raise StepError(StepStatus.FAILED, "field 'command' is empty")
    until: dict[str, Any] = p.get("until") or {}
    for _ in range(5 if until else 1):
        out = ctx.guest.execute(ctx.rw(p["command"]), shell=bool(p.get("shell", False)))
        if not until or _until_met(out, until):
            return f"returncode {out.returncode}"
        time.sleep(0.3)
    raise StepError(StepStatus.FAILED, f"condition {until} not met after 5 tries")


def _until_met(out: CommandReply, until: dict[str, Any]) -> bool:
    return (("returncode" in until and out.returncode == until["returncode"])
            or ("stdout" in until and until["stdout"] in out.output)
            or ("stderr" in until and until["stderr"] in out.error))


def _touch(ctx: TaskContext, step: SetupStep) -> str:
    p = params(step)
    path = ctx.rw(p["path"])
    ctx.guest.upload(path, str(p.get("text", "")).encode("utf-8"))
    return f"wrote {path}"


def _opt(ctx: TaskContext, step: SetupStep) -> str:
    ctx.guest.set_a11y_depth(int(params(step).get("depth", 50)))
    return "accessibility depth set"


def _fetch(url: str) -> bytes:
    try:
        resp = httpx.get(url, follow_redirects=True, timeout=120)
        resp.raise_for_status()
    except httpx.HTTPError as exc:
        raise StepError(StepStatus.FAILED, f"download {url}: {exc}") from exc
    return resp.content


def _download_one(ctx: TaskContext, url: str, path: str) -> None:
    ctx.guest.upload(ctx.rw(path), _fetch(url))


def _download_sb(ctx: TaskContext, step: SetupStep) -> str:
    p = params(step)
    _download_one(ctx, p["url"], p["path"])
    return f"downloaded {p['url']}"


def _download_osworld(ctx: TaskContext, step: SetupStep) -> str:
    files = params(step).get("files") or []
    for f in files:
        _download_one(ctx, f["url"], f["path"])
    return f"downloaded {len(files)} file(s)"


def _upload_file(ctx: TaskContext, step: SetupStep) -> str:
    files = params(step).get("files") or []
    for f in files:
        local = Path(f["local_path"])
        if not local.is_file():
            raise StepError(StepStatus.FAILED, f"local file {local} not found")
        ctx.guest.upload(ctx.rw(f["path"]), local.read_bytes())
    return f"uploaded {len(files)} file(s)"


def _sleep(ctx: TaskContext, step: SetupStep) -> str:
    seconds = float(params(step).get("seconds", step.wait or 0))
    ctx.sleep(min(max(seconds, 0.0), MAX_SLEEP_S))
    return f"slept {seconds:g} s"


def _open(ctx: TaskContext, step: SetupStep) -> str:
    path = ctx.rw(params(step)["path"])
    ctx.guest.open_file(path)
    return f"opened {path}"


def _window(op: str) -> StepHandler:
    def handler(ctx: TaskContext, step: SetupStep) -> str:
        p = params(step)
        ctx.guest.window(op, p["window_name"], strict=bool(p.get("strict", False)),
                         by_class=bool(p.get("by_class", False)))
        return f"{op} {p['window_name']!r}"
    return handler


SCIENCEBOARD_STEPS: dict[str, StepHandler] = {
    "launch": launch_step, "execute": _execute, "touch": _touch, "opt": _opt,
    "download": _download_sb, "sleep": _sleep, "wait": _sleep,
}
OSWORLD_STEPS: dict[str, StepHandler] = {
    "launch": launch_step, "execute": _execute, "command": _execute, "sleep": _sleep,
    "open": _open, "upload_file": _upload_file, "download": _download_osworld,
    "activate_window": _window("activate"), "close_window": _window("close"),
}


def resolve_step(ctx: TaskContext, func: str) -> StepHandler | None:
    if ctx.task.source.format is TaskFormat.OSWORLD:
        return OSWORLD_STEPS.get(func)
    return app_step(ctx.task.app, func) or SCIENCEBOARD_STEPS.get(func)


def run_step(ctx: TaskContext, index: int, step: SetupStep) -> SetupStepResult:
    start = time.perf_counter()
    handler = resolve_step(ctx, step.func)
    status, detail = StepStatus.OK, ""
    if handler is None:
        status, detail = StepStatus.UNSUPPORTED, f"setup step type {step.func!r} is not supported"
    else:
        try:
            detail = handler(ctx, step) or ""
            if step.wait and step.func not in ("launch", "sleep", "wait"):
                ctx.sleep(min(step.wait, MAX_SLEEP_S))
        except StepError as exc:
            status, detail = exc.status, exc.detail
        except GuestError as exc:
            status, detail = StepStatus.FAILED, str(exc)
        except KeyError as exc:
            status, detail = StepStatus.FAILED, f"field {exc.args[0]!r} is missing"
        except (TypeError, ValueError) as exc:
            status, detail = StepStatus.FAILED, f"bad field: {exc}"
    return SetupStepResult(index=index, func=step.func, status=status, detail=detail,
                           elapsed_ms=(time.perf_counter() - start) * 1000)


def run_setup(ctx: TaskContext, steps: list[SetupStep] | None = None) -> SetupReport:
    """Run ``steps`` (default: the task's setup) in order, stopping at the first that does not
    succeed. A broken desktop (:class:`DesktopBroken`) propagates: the provider must replace it."""
    report = SetupReport()
    for i, step in enumerate(ctx.task.setup if steps is None else steps):
        result = run_step(ctx, i, step)
        report.steps.append(result)
        if result.status is not StepStatus.OK:
            break
    return report

