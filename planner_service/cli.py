"""``coda planner``: run the planner service."""

from __future__ import annotations

import typer

from coda.logging import configure_logging

app = typer.Typer(help="The planner service (next-step thoughts, versioned adapters).",
                  no_args_is_help=False)


@app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    host: str | None = typer.Option(None, help="listen address (default CODA_PLANNER_HOST)"),
    port: int | None = typer.Option(None, help="listen port (default CODA_PLANNER_PORT)"),
) -> None:
    """Start the planner service with uvicorn (settings from CODA_PLANNER_* variables)."""
    if ctx.invoked_subcommand is not None:
        return
    import uvicorn

    from planner_service.app import create_app
    from planner_service.settings import PlannerSettings

    settings = PlannerSettings()
    configure_logging(settings.log_level)
    uvicorn.run(create_app(settings), host=host or settings.host, port=port or settings.port,
                log_config=None)
