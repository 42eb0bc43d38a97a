"""One adapter per application: the setup steps and checkers only that application has, spoken
to the application the way ScienceBoard's own application managers do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coda.contracts.desktop import CheckResult
from coda.tasks import SetupStep
from worker.tasks.context import TaskContext

StepHandler = Callable[[TaskContext, SetupStep], str | None]
CheckHandler = Callable[[TaskContext, dict[str, Any]], CheckResult]


@dataclass(frozen=True)
class AppAdapter:
    name: str
    steps: dict[str, StepHandler] = field(default_factory=dict)
    checkers: dict[str, CheckHandler] = field(default_factory=dict)
