"""``coda guest``: run the guest agent on a desktop."""

from __future__ import annotations

import secrets
from typing import Annotated, Any

import typer
from rich.console import Console

app = typer.Typer(help="The guest agent that runs on each desktop (OSWorld-compatible).",
                  no_args_is_help=True)
console = Console(stderr=True)


@app.command()
def serve(
    port: Annotated[int | None, typer.Option(help="port (default 5000, OSWorld's)")] = None,
    host: Annotated[str | None, typer.Option(help="address (default all; loopback when "
                                                  "--throwaway-local-display)")] = None,
    token: Annotated[str | None, typer.Option(
        envvar="CODA_GUEST_TOKEN", help="bearer token clients must send (default: the VM's "
        "guestinfo.coda.token, set by the vsphere provider)")] = None,
    display: Annotated[str | None, typer.Option(help="X display (default $DISPLAY)")] = None,
    throwaway_local_display: Annotated[bool, typer.Option(
        "--throwaway-local-display",
        help="serve without a token: a throw-away local display only this host reaches")] = False,
    desktop_id: Annotated[str | None, typer.Option(help="marks the processes it starts")] = None,
) -> None:
    """Serve OSWorld's guest routes (and CODA's) for one X display."""
    import uvicorn

    from coda.logging import configure_logging
    from worker.guest.app import create_app
    from worker.guest.settings import GuestSettings, MissingTokenError

    if token is None and not throwaway_local_display:
        # a VM of the vsphere provider: the token it set as the VM's guestinfo.coda.token
        from coda.guestenv import TOKEN_KEY
        from worker.guest.guestinfo import read_guestinfo

        token = read_guestinfo(TOKEN_KEY)
    overrides: dict[str, Any] = {k: v for k, v in {
        "port": port, "host": host, "token": token, "display": display,
        "desktop_id": desktop_id}.items() if v is not None}
    if throwaway_local_display:
        overrides["throwaway_local_display"] = True
    settings = GuestSettings(**overrides)  # env first, then these flags
    configure_logging(settings.log_level)
    try:
        api = create_app(settings)
    except MissingTokenError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    uvicorn.run(api, host=settings.bind_host, port=settings.port, log_level="warning",
                access_log=False)


@app.command()
def token() -> None:
    """Print a new random token (for CODA_GUEST_TOKEN)."""
    typer.echo(secrets.token_urlsafe(32))
