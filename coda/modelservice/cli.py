"""Serving a model service from its CLI (``coda planner|executor|judge``): settings from the
environment and flags, clear refusals instead of tracebacks for what a user can fix (a bad
setting, a default token, a missing extra), and real errors reported as they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from rich.console import Console

from coda.logging import configure_logging
from coda.modelservice.imports import missing_package

S = TypeVar("S", bound=BaseSettings)
console = Console(stderr=True)


def settings_from_flags(cls: type[S], **flags: Any) -> S:
    """Settings from the environment with every flag that was given (not ``None``) on top."""
    try:
        return cls(**{k: v for k, v in flags.items() if v is not None})
    except ValidationError as exc:
        raise typer.BadParameter(_first_error(exc)) from exc


def _first_error(exc: ValidationError) -> str:
    lines = [f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}"
             for e in exc.errors()]
    return "; ".join(lines)


def serve(make_settings: Callable[[], Any], make_app: Callable[[Any], Any]) -> None:
    """Build the settings and the app (importing what they need) and run the app with uvicorn
    on ``settings.host:port``; a missing extra or a default token is a clear refusal."""
    try:
        from coda.modelservice.settings import DefaultSecretError

        settings = make_settings()
        configure_logging(settings.log_level)
        import uvicorn

        app = make_app(settings)
    except ImportError as exc:
        package = missing_package(exc)
        if package is None:
            raise  # a real import error: reported as it is, with its traceback
        console.print(f"[red]the '{package}' package is missing:[/red] install the models "
                      "extra (pip install 'coda[models]')")
        raise typer.Exit(2) from exc
    except DefaultSecretError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    except ValueError as exc:  # a configuration the app refuses (e.g. no judge model)
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    uvicorn.run(app, host=settings.host, port=settings.port, log_config=None, access_log=False)
