"""``coda executor``: run the executor service (the flags: :mod:`coda.modelservice.cli`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from coda.modelservice.cli import add_serve

if TYPE_CHECKING:
    from fastapi import FastAPI

    from executor_service.settings import ExecutorSettings

app = typer.Typer(help="The executor service (UI-TARS-1.5: thought -> action); settings from "
                       "CODA_EXECUTOR_* variables, flags on top.", no_args_is_help=False)


def _settings() -> type[ExecutorSettings]:
    from executor_service.settings import ExecutorSettings

    return ExecutorSettings


def _app(settings: ExecutorSettings) -> FastAPI:
    from executor_service.app import create_app

    return create_app(settings)


add_serve(app, settings=_settings, make_app=_app, model_flags=True)


if __name__ == "__main__":
    app()
