"""``coda trainer``: decoupled GRPO on the planner, fed by the master's groups."""

from __future__ import annotations

import asyncio
from typing import Any

import typer
from rich.console import Console

from coda.logging import configure_logging

app = typer.Typer(help="Decoupled GRPO on the planner (groups from the master, versions to the "
                       "planner services).", no_args_is_help=False)
console = Console(stderr=True)


@app.callback(invoke_without_command=True)
def train(
    ctx: typer.Context,
    master_url: str | None = typer.Option(None, help="master URL (CODA_TRAINER_MASTER_URL)"),
    model: str | None = typer.Option(None, help="base planner directory (CODA_TRAINER_MODEL)"),
    checkpoint_dir: str | None = typer.Option(None, help="checkpoints; resumed from"),
    planner_url: list[str] = typer.Option(
        [], help="planner service loading each version (repeat for replicas)"),
    max_updates: int | None = typer.Option(None, help="stop after N updates"),
    idle_exit_s: float | None = typer.Option(None, help="stop after this long without groups"),
) -> None:
    """Lease groups, train, checkpoint, ack, publish versions (settings: CODA_TRAINER_*)."""
    if ctx.invoked_subcommand is not None:
        return
    from pydantic import ValidationError

    from trainer.config import TrainerConfig, overrides

    try:
        cfg = TrainerConfig(**overrides(master_url=master_url, model=model,
                                        checkpoint_dir=checkpoint_dir, planner_urls=planner_url,
                                        max_updates=max_updates, idle_exit_s=idle_exit_s))
    except ValidationError as exc:
        console.print(f"[red]invalid trainer settings:[/]\n{exc}")
        raise typer.Exit(2) from exc
    configure_logging(cfg.log_level)
    import httpx

    from coda.clients.base import ServiceError

    try:
        asyncio.run(_run(cfg))
    except (ServiceError, httpx.HTTPError) as exc:
        console.print(f"[red]master or planner at fault:[/] {exc} (master: {cfg.master_url})")
        raise typer.Exit(1) from exc
    except OSError as exc:  # a model directory that is not there, an unwritable checkpoint dir
        console.print(f"[red]cannot start the trainer:[/] {exc}")
        raise typer.Exit(1) from exc


async def _run(cfg: Any) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from trainer.grpo.loop import Trainer

    trainer = Trainer(cfg)
    columns = [TextColumn("[bold]GRPO"), BarColumn(), MofNCompleteColumn(),
               TextColumn("reward {task.fields[reward]} · {task.fields[version]}")]
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("updates", total=cfg.max_updates, reward="-",
                                     version=trainer.state.versions[-1])
            done = 0
            while cfg.max_updates is None or done < cfg.max_updates:
                reports = await trainer.run(max_updates=1)
                if not reports:
                    break  # idle exit
                done += 1
                r = reports[0]
                progress.update(task, advance=1, reward=f"{r.metrics.get('reward_mean', 0):.3f}",
                                version=trainer.state.versions[-1])
    finally:
        await trainer.aclose()


if __name__ == "__main__":
    app()
