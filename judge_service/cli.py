"""``coda judge``: run the judge service, or calibrate one against labelled trajectories."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from coda.modelservice.cli import add_serve

if TYPE_CHECKING:
    from fastapi import FastAPI

    from judge_service.settings import JudgeSettings

app = typer.Typer(help="The judge service (trajectory verdicts; settings from CODA_JUDGE_* "
                       "variables, flags on top) and its calibration.")
console = Console(stderr=True)


def _settings() -> type[JudgeSettings]:
    from judge_service.settings import JudgeSettings

    return JudgeSettings


def _app(settings: JudgeSettings) -> FastAPI:
    from judge_service.app import create_app

    return create_app(settings)


add_serve(app, settings=_settings, make_app=_app, model_flags=False)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


@app.command("calibrate")
def calibrate_cmd(
    file: Annotated[Path, typer.Argument(help="JSONL of labelled trajectories")],
    judge_url: Annotated[str, typer.Option("--judge-url", help="judge service URL")],
    token: Annotated[str | None, typer.Option(
        "--token", envvar="CODA_JUDGE_TOKEN",
        help="an inference token of the judge service")] = None,
    votes: Annotated[int, typer.Option(help="voting@k")] = 4,
    multi_resolution: Annotated[bool, typer.Option(help="low-resolution first pass")] = True,
    max_frames: Annotated[int, typer.Option(help="frames per trajectory")] = 16,
    out: Annotated[Path | None, typer.Option(
        "--out", help="write the metrics as JSON here")] = None,
    timeout: Annotated[float, typer.Option(help="seconds per judge request")] = 600.0,
) -> None:
    """Precision, recall and F1 of the judge service on a labelled set (success = positive)."""
    from coda.clients.judge import JudgeClient
    from coda.contracts.services_api import JudgePolicy
    from judge_service.calibrate import CalibrationError, calibrate, dumps, load_labelled

    try:
        total = len(load_labelled(file))
        policy = JudgePolicy(votes=votes, multi_resolution=multi_resolution, max_frames=max_frames)
    except (CalibrationError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc

    async def run() -> str:
        client = JudgeClient(judge_url, token=token, timeout=timeout)
        try:
            with Progress(console=console) as progress:
                task = progress.add_task("judging", total=total)
                result = await calibrate(file, client, policy,
                                         on_done=lambda _: progress.advance(task))
        finally:
            await client.aclose()
        m = result.metrics
        table = Table(title=f"judge calibration on {file.name}")
        for col in ("n", "TP", "FP", "FN", "TN", "precision", "recall", "F1"):
            table.add_column(col)
        table.add_row(str(m.n), str(m.tp), str(m.fp), str(m.fn), str(m.tn),
                      _fmt(m.precision), _fmt(m.recall), _fmt(m.f1))
        Console().print(table)
        return dumps(result)

    try:
        text = asyncio.run(run())
    except Exception as exc:  # the CLI reports, it does not dump a traceback
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
        console.print(f"metrics written to {out}")
