"""``coda learn`` run with the closed loop replaced by a stand-in that keeps the settings it
got and returns a result made from them (no loop runs): for the tests of the command's
options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from coda_app.learning.result import LearnResult
from coda_app.learning.settings import LearnSettings


@dataclass
class Invoked:
    code: int
    output: str
    seen: list[LearnSettings] = field(default_factory=list)


def invoke_learn(args: list[str], monkeypatch: pytest.MonkeyPatch,
                 make: Callable[[LearnSettings], LearnResult]) -> Invoked:
    """``coda learn ARGS`` with a stand-in loop whose result ``make`` builds."""
    from coda_app.learning import run
    from coda_app.learning.cli import learn

    seen: list[LearnSettings] = []

    class StandIn:
        def __init__(self, settings: LearnSettings) -> None:
            self.s = settings
            self.run_dir = Path("/nonexistent")
            seen.append(settings)

        async def run(self) -> LearnResult:
            return make(self.s)

    monkeypatch.setattr(run, "ClosedLoop", StandIn)
    app = typer.Typer()
    app.command()(learn)
    out = CliRunner().invoke(app, args)
    return Invoked(out.exit_code, out.output, seen)
