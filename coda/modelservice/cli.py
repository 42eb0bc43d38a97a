"""Serving a model service from its CLI (``coda planner|executor|judge``): settings from the
environment and flags, clear refusals instead of tracebacks for what a user can fix (a bad
setting, a default token, a missing extra), and real errors reported as they are.

The serve flags are defined here once (:func:`add_serve`), so the three services take the same
names with the same meaning: ``--host``, ``--port``, ``--log-level`` for each, and for a service
that runs one model (the planner, the executor) its backend's ``--backend``, ``--model``,
``--base-url``, ``--device``, ``--max-pixels``. A flag that is not given leaves the setting to
the service's ``CODA_<ROLE>_*`` environment variable (or its default). The judge's models are a
list (``CODA_JUDGE_MODELS``), which one set of backend flags could not name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from rich.console import Console

from coda.logging import configure_logging
from coda.modelservice.imports import missing_package

S = TypeVar("S", bound=BaseSettings)
console = Console(stderr=True)

Host = Annotated[str | None, typer.Option(help="listen address (default: CODA_<ROLE>_HOST)")]
Port = Annotated[int | None, typer.Option(help="listen port (default: CODA_<ROLE>_PORT)")]
LogLevel = Annotated[str | None, typer.Option(
    help="DEBUG, INFO, WARNING... (default: CODA_<ROLE>_LOG_LEVEL)")]
Backend = Annotated[str | None, typer.Option(help="transformers | openai | replay")]
Model = Annotated[str | None, typer.Option(
    help="model directory (transformers), served name (openai) or replay file (replay)")]
BaseUrl = Annotated[str | None, typer.Option(help="OpenAI-compatible server URL (openai)")]
Device = Annotated[str | None, typer.Option(help="torch device (transformers)")]
MaxPixels = Annotated[int | None, typer.Option(
    help="image budget per screenshot (transformers)")]


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


def add_serve(app: typer.Typer, *, settings: Callable[[], type[S]],
              make_app: Callable[[S], Any], model_flags: bool) -> None:
    """Make serving the service ``app``'s callback (run when no subcommand is given), with the
    shared flags; ``model_flags``: the service runs one model, whose backend flags it takes.
    ``settings`` and ``make_app`` import what they need only when the service starts."""

    def start(ctx: typer.Context, **flags: Any) -> None:
        if ctx.invoked_subcommand is None:
            serve(lambda: settings_from_flags(settings(), **flags), make_app)

    def serve_service(ctx: typer.Context, host: Host = None, port: Port = None,
                      log_level: LogLevel = None) -> None:
        start(ctx, host=host, port=port, log_level=log_level)

    def serve_model(ctx: typer.Context, host: Host = None, port: Port = None,
                    log_level: LogLevel = None, backend: Backend = None, model: Model = None,
                    base_url: BaseUrl = None, device: Device = None,
                    max_pixels: MaxPixels = None) -> None:
        start(ctx, host=host, port=port, log_level=log_level, backend=backend, model=model,
              base_url=base_url, device=device, max_pixels=max_pixels)

    app.callback(invoke_without_command=True)(serve_model if model_flags else serve_service)
