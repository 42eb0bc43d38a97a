"""``coda tasks coverage DIR [--provider local] [--json FILE]``: the task coverage report
(:mod:`worker.tasks.coverage`) as a Rich table, and as JSON on standard output (``--json -``)
or in a file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from coda.contracts.coverage import CoverageReport
from worker.tasks.coverage import coverage

app = typer.Typer(help="Task coverage on a provider.")


def table(report: CoverageReport) -> Table:
    t = Table(title=f"Tasks with a real verdict on provider {report.provider!r}")
    for col in ("application", "tasks", "load", "implemented", "real verdict here"):
        t.add_column(col, justify="left" if col == "application" else "right")
    for a in [*report.apps, report.total]:
        t.add_row(a.app, str(a.tasks), str(a.loaded), str(a.implemented), str(a.runnable),
                  end_section=a is report.apps[-1])
    return t


@app.command("coverage")
def coverage_command(
    folder: Annotated[Path, typer.Argument(exists=True, file_okay=False,
                                           help="folder of task files (searched recursively)")],
    provider: Annotated[str, typer.Option(help="the provider to assess")] = "local",
    json_out: Annotated[str | None, typer.Option(
        "--json", help="write the report as JSON to this file ('-': standard output)")] = None,
) -> None:
    """How many tasks load, are implemented, and can run with a real verdict, and why not."""
    report = coverage(folder, provider)
    report.folder = folder.as_posix()
    if json_out == "-":
        typer.echo(report.model_dump_json(indent=2))
        return
    console = Console()
    console.print(table(report))
    for reason, names in report.total.reasons.items():
        console.print(f"[bold]{len(names)}[/bold] {reason}: {', '.join(names)}")
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(report.model_dump_json(indent=2) + "\n")
