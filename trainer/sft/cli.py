"""``coda train sft``: fine-tune a generalist planner on an exported dataset (stage 2)."""

from __future__ import annotations

import asyncio

import typer
from rich.console import Console

from coda.logging import configure_logging
from trainer.config import overrides

app = typer.Typer(help="Supervised fine-tuning of a generalist planner (stage 2).",
                  no_args_is_help=True)
console = Console(stderr=True)


@app.command()
def sft(
    dataset: str = typer.Argument(..., help="directory written by 'coda dataset export'"),
    model: str | None = typer.Option(None, help="base planner directory (CODA_SFT_MODEL)"),
    epochs: int | None = typer.Option(None, help="passes over the dataset"),
    learning_rate: float | None = typer.Option(None, help="AdamW learning rate"),
    master_url: str | None = typer.Option(None, help="master to register the version with"),
    publish: bool = typer.Option(True, help="publish the result as a planner version"),
    planner_url: list[str] = typer.Option(
        [], help="planner service loading the result (repeat for replicas)"),
) -> None:
    """Train on the dataset, print the loss before and after, publish the version."""
    from pydantic import ValidationError
    from rich.progress import Progress

    from trainer.sft.dataset import load_rows
    from trainer.sft.train import SFTConfig, publish_sft, train_sft

    try:
        cfg = SFTConfig(**overrides(dataset=dataset, model=model, epochs=epochs,
                                    learning_rate=learning_rate, master_url=master_url,
                                    publish=publish, planner_urls=planner_url))
    except ValidationError as exc:
        console.print(f"[red]invalid SFT settings:[/]\n{exc}")
        raise typer.Exit(2) from exc
    configure_logging(cfg.log_level)
    try:
        rows = list(load_rows(cfg.dataset))
    except FileNotFoundError as exc:
        console.print(f"[red]dataset: {exc}[/]")
        raise typer.Exit(2) from exc
    if not rows:
        console.print(f"[red]dataset {cfg.dataset} has no rows[/]")
        raise typer.Exit(2)
    with Progress(console=console) as progress:
        task = progress.add_task("SFT", total=None)

        def step(done: int, total: int, loss: float) -> None:
            progress.update(task, completed=done, total=total, description=f"SFT loss {loss:.3f}")

        result, policy = train_sft(cfg, rows, on_step=step)
    console.print(f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f} "
                  f"({result.steps} steps over {len(rows)} planner turns)")
    if cfg.publish:
        asyncio.run(publish_sft(cfg, policy, result))
        console.print(f"published {result.version}: {result.uri}")
