"""``coda learn``: run the closed loop and show whether the planner got better."""

from __future__ import annotations

import asyncio
import signal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from coda.logging import configure_logging
from coda_app.cli_options import LogFormat, LogFormatOption, json_logs
from coda_app.learning.curriculum import CurriculumError
from coda_app.learning.result import LearnResult
from coda_app.learning.settings import OCR_EXECUTOR, RULES_JUDGE, LearnSettings
from trainer.config import overrides

console = Console(stderr=True)


class ExecutorChoice(StrEnum):
    """``--executor``: the curricula's recorded UI-TARS outputs, or the OCR executor."""

    REPLAY = "replay"
    OCR = "ocr"


class JudgeChoice(StrEnum):
    """``--judge``: the curricula's recorded verdicts, or the rule-based judge."""

    REPLAY = "replay"
    RULES = "rules"


def model_overrides(executor: ExecutorChoice | None, judge: JudgeChoice | None
                    ) -> dict[str, Any]:
    """The settings ``--executor`` and ``--judge`` stand for ('replay': the recordings, the
    settings' default; given but 'replay', it overrides a CODA_LEARN_EXECUTOR / _JUDGE)."""
    out: dict[str, Any] = {}
    if executor is not None:
        out["executor"] = dict(OCR_EXECUTOR) if executor is ExecutorChoice.OCR else None
    if judge is not None:
        out["judge"] = dict(RULES_JUDGE) if judge is JudgeChoice.RULES else None
    return out


def curve_table(result: LearnResult) -> Table:
    """The curve by planner version: success rate with its 95 % interval, and the update's
    mean group reward."""
    t = Table(title=f"{result.run}: success rate per planner version "
                    f"(control: {result.reward_control})")
    for col in ("version", "updates", "rollouts", "success", "95 % interval",
                "mean group reward"):
        t.add_column(col)
    rewards = {u.policy_version: u.metrics.get("reward_mean") for u in result.updates}
    for m in result.curve:
        reward = rewards.get(m.planner_version)
        t.add_row(m.planner_version, str(m.update), str(m.rollouts),
                  f"{100 * (m.rate or 0):.0f} %", f"{100 * m.ci_low:.0f}-{100 * m.ci_high:.0f} %",
                  "" if reward is None else f"{reward:.3f}")
    return t


def learn(
    tasks: Annotated[Path | None, typer.Argument(
        help="curriculum file or folder (default: examples/learning)")] = None,
    updates: Annotated[int | None, typer.Option(help="GRPO updates at most")] = None,
    rollouts: Annotated[int | None, typer.Option(
        help="rollouts per task of each version measured")] = None,
    target: Annotated[float | None, typer.Option(help="success rate to reach")] = None,
    stop_at_target: Annotated[bool | None, typer.Option(
        help="stop once a version reaches the target")] = None,
    control: Annotated[str | None, typer.Option(
        help="a control run: 'derangement' (anti-learning: each plan gets another plan's "
             "reward; old name 'shuffle'), 'uniform' (rewards permuted uniformly: a null) or "
             "'zero' (no optimizer step: the loop's noise); 'none' trains")] = None,
    executor: Annotated[ExecutorChoice | None, typer.Option(
        help="the frozen executor: 'replay' (the curricula's recorded UI-TARS outputs, the "
             "default) or 'ocr' (grounds plans on the screenshot's OCR text, no recording)")
    ] = None,
    judge: Annotated[JudgeChoice | None, typer.Option(
        help="the judge: 'replay' (the curricula's recorded verdicts, the default) or 'rules' "
             "(the rule-based judge on the task checker's verdict, no recording); "
             "--executor ocr --judge rules is a run with no recording in the loop")] = None,
    provider: Annotated[str | None, typer.Option(help="local or docker desktops")] = None,
    slots: Annotated[int | None, typer.Option(help="desktops at once")] = None,
    home: Annotated[Path | None, typer.Option(help="runs and the warm start go here")] = None,
    run_name: Annotated[str | None, typer.Option(help="name of the run")] = None,
    out: Annotated[Path | None, typer.Option(help="also write the result JSON here")] = None,
    log_format: LogFormatOption = LogFormat.AUTO,
) -> None:
    """The closed loop on real desktops: a warm-started planner rolls out, the judge labels,
    group jobs score its plans, GRPO updates it, the planner pulls each new version; every
    version's success rate is measured on fresh episodes. Settings: CODA_LEARN_*
    (docs/trainer.md)."""
    from coda_app.learning.run import ClosedLoop

    try:
        settings = LearnSettings(**overrides(
            tasks=tasks, updates=updates, rollouts=rollouts, target=target,
            stop_at_target=stop_at_target, reward_control=control, provider=provider,
            slots=slots, home=home, run_name=run_name, out=out),
            **model_overrides(executor, judge))
    except ValidationError as exc:
        console.print(f"[red]invalid settings:[/]\n{exc}")
        raise typer.Exit(2) from exc
    configure_logging("INFO", json_logs=json_logs(log_format))
    try:
        loop = ClosedLoop(settings)
    except CurriculumError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    # SIGTERM (a supervisor's stop, kill's default) takes Ctrl-C's way out: the run's worker,
    # services, desktops and private stores are stopped, where the default action left the
    # private Postgres and Redis running
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    result = asyncio.run(loop.run())
    console.print(curve_table(result))
    reached = result.reached
    console.print(f"target {100 * result.target:.0f} %: " + (
        f"reached by {reached.planner_version} after {reached.update} updates"
        if reached else "not reached") + f"; executor {result.executor.backend}, judge "
        f"{result.judge_backend}; {result.seconds:.0f} s; result in "
        f"{loop.run_dir / 'result.json'}")
    if not result.executor_unchanged:
        console.print("[red]the executor changed during the run[/]")
        raise typer.Exit(1)
