"""``coda executor``: run the executor service with uvicorn (flags override settings)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from coda.modelservice.cli import serve as serve_app
from coda.modelservice.cli import settings_from_flags

if TYPE_CHECKING:
    from fastapi import FastAPI

    from executor_service.settings import ExecutorSettings

app = typer.Typer(help="The executor service (UI-TARS-1.5: thought -> action).",
                  no_args_is_help=False)


@app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="bind address")] = None,
    port: Annotated[int | None, typer.Option(help="bind port")] = None,
    backend: Annotated[str | None, typer.Option(help="transformers | openai")] = None,
    model: Annotated[str | None, typer.Option(help="model directory or served name")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint")] = None,
    device: Annotated[str | None, typer.Option(help="torch device (transformers)")] = None,
    max_pixels: Annotated[int | None, typer.Option(help="image pixel budget")] = None,
    log_level: Annotated[str | None, typer.Option(help="DEBUG, INFO, WARNING")] = None,
) -> None:
    """Start the executor service (CODA_EXECUTOR_* environment variables are the defaults)."""
    if ctx.invoked_subcommand is not None:
        return

    def make_settings() -> ExecutorSettings:
        from executor_service.settings import ExecutorSettings

        return settings_from_flags(ExecutorSettings, host=host, port=port, backend=backend,
                                  model=model, base_url=base_url, device=device,
                                  max_pixels=max_pixels, log_level=log_level)

    def make_app(settings: ExecutorSettings) -> FastAPI:
        from executor_service.app import create_app

        return create_app(settings)

    serve_app(make_settings, make_app)


if __name__ == "__main__":
    app()
