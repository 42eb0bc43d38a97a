"""The generic ``launch`` setup step on its own module: the setup runner
(:mod:`worker.tasks.setup`, which says how it waits) and the application adapters that wrap it
(KAlgebra's) both use it."""

from __future__ import annotations

import time

from coda.contracts.desktop import StepStatus
from coda.tasks import SetupStep
from worker.tasks.context import StepError, TaskContext, params

MAX_SLEEP_S = 300.0


def launch_step(ctx: TaskContext, step: SetupStep) -> str:
    p = params(step)
    if not p.get("command"):
        raise StepError(StepStatus.FAILED, "field 'command' is empty")
    command = ctx.rw(p["command"])
    shell = bool(p.get("shell", False))
    before = ctx.guest.windows()
    ctx.guest.launch(command, shell=shell)
    if before is None:
        ctx.sleep(min(step.wait or 0.0, MAX_SLEEP_S))
        return f"launched; waited {step.wait or 0:g} s (the guest cannot list windows)"
    known = {w["id"] for w in before}
    deadline = time.monotonic() + ctx.launch_timeout_s
    while time.monotonic() < deadline:
        new = [w for w in ctx.guest.windows() or [] if w["id"] not in known]
        if new:
            return f"window {new[0]['title']!r} appeared"
        time.sleep(0.1)
    raise StepError(StepStatus.FAILED, f"no window appeared within {ctx.launch_timeout_s:g} s "
                                       f"after launching {command!r}")
