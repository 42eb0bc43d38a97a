"""What a setup step or checker gets: the task, the desktop's guest and how task files address
that desktop (path rewrites, the application API port), plus per-task scratch state."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coda.contracts.desktop import CheckStatus, StepStatus
from coda.tasks import SetupStep, TaskSpec
from worker.providers.base import Desktop, GuestLayout
from worker.providers.client import GuestClient


def params(step: SetupStep) -> dict[str, Any]:
    """The step's own fields (everything but ``func`` and ``wait``)."""
    return step.model_dump(exclude={"func", "wait"})


class StepError(RuntimeError):
    """A setup step that did not succeed, with its typed status."""

    def __init__(self, status: StepStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class CheckError(RuntimeError):
    """A checker that could not decide, with its typed status."""

    def __init__(self, status: CheckStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class TaskContext:
    task: TaskSpec
    guest: GuestClient
    layout: GuestLayout = field(default_factory=GuestLayout)
    launch_timeout_s: float = 60.0
    errata: bool = False  # corrected checkers for known-defective task checks (the worker's
    # CODA_WORKER_CHECKER_ERRATA; default off: the task's own checkers, as ScienceBoard runs them)
    scratch: dict[str, Any] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def for_desktop(cls, desktop: Desktop, task: TaskSpec, **kwargs: Any) -> TaskContext:
        if desktop.guest is None:
            raise RuntimeError("reset() the desktop before setting up a task")
        return cls(task=task, guest=desktop.guest, layout=desktop.layout, **kwargs)

    def rw(self, value: Any) -> Any:
        """Rewrite the task's guest paths and «PORTLIKE» for this desktop (strings, lists)."""
        if isinstance(value, str):
            return self.layout.rewrite(value)
        if isinstance(value, list):
            return [self.rw(v) for v in value]
        return value

    @property
    def app_url(self) -> str:
        """Base URL of the application state API ScienceBoard's patched apps serve."""
        return self.layout.app_url
