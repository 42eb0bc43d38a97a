"""``coda executor``: run the executor service with uvicorn (flags override settings)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from pydantic import ValidationError

from coda.logging import configure_logging
from executor_service.settings import ExecutorSettings


def settings_from_flags(**flags: Any) -> ExecutorSettings:
    """Settings from the environment, with every flag that was given (not ``None``) on top."""
    if flags.get("backend") not in (None, "transformers", "openai"):
        raise typer.BadParameter("must be 'transformers' or 'openai'", param_hint="--backend")
    try:
        return ExecutorSettings(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc


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
    import uvicorn

    from executor_service.app import create_app

    settings = settings_from_flags(host=host, port=port, backend=backend, model=model,
                                   base_url=base_url, device=device, max_pixels=max_pixels,
                                   log_level=log_level)
    configure_logging(settings.log_level)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_config=None, access_log=False)


if __name__ == "__main__":
    app()
