"""``coda planner``: run the planner service (the flags: :mod:`coda.modelservice.cli`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from coda.modelservice.cli import add_serve

if TYPE_CHECKING:
    from fastapi import FastAPI

    from planner_service.settings import PlannerSettings

app = typer.Typer(help="The planner service (next-step thoughts, versioned adapters); settings "
                       "from CODA_PLANNER_* variables, flags on top.", no_args_is_help=False)


def _settings() -> type[PlannerSettings]:
    from planner_service.settings import PlannerSettings

    return PlannerSettings


def _app(settings: PlannerSettings) -> FastAPI:
    from planner_service.app import create_app

    return create_app(settings)


add_serve(app, settings=_settings, make_app=_app, model_flags=True)
