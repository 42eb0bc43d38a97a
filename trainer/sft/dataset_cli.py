"""``coda dataset export``: judged trajectories -> a parquet dataset of planner turns."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import typer
from rich.console import Console

app = typer.Typer(help="Stage-2 datasets of judged trajectories.", no_args_is_help=True)
console = Console(stderr=True)


@app.command()
def export(
    out: Path = typer.Argument(..., help="output directory (parquet + README.json)"),
    master_url: str = typer.Option(os.environ.get("CODA_MASTER_URL", "http://127.0.0.1:8000"),
                                   help="the master"),
    token: str | None = typer.Option(None, help="admin token (default CODA_ADMIN_TOKEN)"),
    app_name: list[str] = typer.Option(
        [], "--app", help="only these apps (repeat); default all"),
    batch: str | None = typer.Option(None, help="only this batch id"),
    version: str | None = typer.Option(None, help="only episodes of this planner version"),
    verdict: str = typer.Option("correct", help="correct (default), incorrect or any"),
    keep_images: int = typer.Option(1, min=0, help="past screenshots kept per row (as the "
                                                   "planner's CODA_PLANNER_KEEP_IMAGES)"),
) -> None:
    """Write successful judged trajectories (all apps unless filtered) as planner turns."""
    from rich.progress import Progress

    from coda.clients.base import ServiceError
    from coda.clients.master import MasterClient
    from trainer.sft.dataset import ExportFilter, export_dataset

    if verdict not in ("correct", "incorrect", "any"):
        console.print(f"[red]--verdict must be correct, incorrect or any, not {verdict!r}[/]")
        raise typer.Exit(2)
    flt = ExportFilter(apps=list(app_name), batch_id=batch, planner_version=version,
                       verdict=verdict)

    async def run() -> None:
        tok = token or os.environ.get("CODA_ADMIN_TOKEN")
        with Progress(console=console) as progress:
            task = progress.add_task("trajectories", total=None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            async with MasterClient(master_url, token=tok) as master:
                stats = await export_dataset(master, out, flt, keep_images=keep_images,
                                             progress=advance)
        console.print(f"{stats.rows} planner turns from {stats.trajectories} trajectories "
                      f"({', '.join(f'{k}: {v}' for k, v in sorted(stats.apps.items())) or '-'})"
                      f" -> {stats.path}")

    try:
        asyncio.run(run())
    except ServiceError as exc:
        console.print(f"[red]master: {exc}[/]")
        raise typer.Exit(1) from exc
