"""``coda planner``: run the planner service."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from coda.modelservice.cli import serve as serve_app
from coda.modelservice.cli import settings_from_flags

if TYPE_CHECKING:
    from fastapi import FastAPI

    from planner_service.settings import PlannerSettings

app = typer.Typer(help="The planner service (next-step thoughts, versioned adapters).",
                  no_args_is_help=False)


@app.callback(invoke_without_command=True)
def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="listen address (CODA_PLANNER_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="listen port (CODA_PLANNER_PORT)")] = None,
) -> None:
    """Start the planner service with uvicorn (settings from CODA_PLANNER_* variables)."""
    if ctx.invoked_subcommand is not None:
        return

    def make_settings() -> PlannerSettings:
        from planner_service.settings import PlannerSettings

        return settings_from_flags(PlannerSettings, host=host, port=port)

    def make_app(settings: PlannerSettings) -> FastAPI:
        from planner_service.app import create_app

        return create_app(settings)

    serve_app(make_settings, make_app)
