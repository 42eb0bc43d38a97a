"""``coda worker``: run a VM-host worker (flags override ``CODA_WORKER_*`` settings)."""

from __future__ import annotations

import asyncio
import json
import signal
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from coda.logging import configure_logging, get_logger

app = typer.Typer(help="The VM-host worker: episodes on desktops, judge and group jobs.",
                  no_args_is_help=False)
log = get_logger("worker.cli")


def _settings(**flags: Any) -> Any:
    from worker.settings import WorkerSettings

    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return WorkerSettings(**given)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        typer.echo(f"coda worker: {field}: {err['msg']}", err=True)
        raise typer.Exit(2) from None


@app.callback(invoke_without_command=True)
def run(
    ctx: typer.Context,
    master_url: Annotated[str | None, typer.Option(help="the master's URL")] = None,
    token: Annotated[str | None, typer.Option(help="a worker token of the master")] = None,
    name: Annotated[str | None, typer.Option(help="worker name (default: host name)")] = None,
    slots: Annotated[int | None, typer.Option(help="desktop slots (episodes at once)")] = None,
    job_slots: Annotated[int | None, typer.Option(help="judge/group jobs at once")] = None,
    kinds: Annotated[str | None, typer.Option(help="episode,judge,group")] = None,
    provider: Annotated[str | None, typer.Option(help="local | docker | vmware | vsphere")] = None,
    provider_options: Annotated[str | None, typer.Option(help="provider options (JSON)")] = None,
    planner_url: Annotated[str | None, typer.Option(help="planner service URL")] = None,
    executor_url: Annotated[str | None, typer.Option(help="executor service URL")] = None,
    judge_url: Annotated[str | None, typer.Option(help="judge service URL")] = None,
    service_token: Annotated[str | None, typer.Option(help="model services' token")] = None,
    max_steps: Annotated[int | None, typer.Option(help="cap on steps per episode")] = None,
    drain_grace_s: Annotated[float | None, typer.Option(help="SIGTERM grace (s)")] = None,
) -> None:
    """Lease jobs from the master and run them until SIGTERM / Ctrl-C (then drain)."""
    if ctx.invoked_subcommand is not None:
        return
    try:
        options = json.loads(provider_options) if provider_options is not None else None
    except ValueError as exc:
        typer.echo(f"coda worker: --provider-options: not JSON ({exc})", err=True)
        raise typer.Exit(2) from None
    settings = _settings(master_url=master_url, token=token, name=name, slots=slots,
                         job_slots=job_slots, kinds=kinds, provider=provider,
                         provider_options=options, planner_url=planner_url,
                         executor_url=executor_url, judge_url=judge_url,
                         service_token=service_token, max_steps=max_steps,
                         drain_grace_s=drain_grace_s)
    configure_logging(settings.log_level)
    from worker.providers.base import ProviderConflict
    from worker.providers.factory import ProviderConfigError, make_provider
    from worker.providers.liveness import new_instance
    from worker.runner import TokenRefused, Worker

    instance = new_instance()  # this process: its desktops' owner mark beside the name
    log.info("worker.instance", name=settings.name, instance=instance)
    try:
        prov = make_provider(settings.provider, settings.provider_options,
                             screen=settings.screen, slot_root=settings.slot_root,
                             owner=settings.name, instance=instance,
                             alive=(settings.alive_interval_s, settings.alive_ttl_s))
    except ProviderConfigError as exc:
        typer.echo(f"coda worker: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        asyncio.run(serve(Worker(settings, prov)))
    except TokenRefused as exc:
        typer.echo(f"coda worker: the master refused this worker's token ({exc}); "
                   "leasing stopped", err=True)
        raise typer.Exit(3) from None
    except ProviderConflict as exc:
        typer.echo(f"coda worker: {exc}", err=True)
        raise typer.Exit(4) from None


async def serve(worker: Any) -> None:
    """Run ``worker`` until SIGTERM or SIGINT; a second signal skips the grace period."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.warning("worker.stop_now", signal=signum)
            worker.settings.drain_grace_s = 0.0
            for task in list(worker.running.values()):
                task.cancel()
            return
        log.info("worker.stop_requested", signal=signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    await worker.run(stop)


if __name__ == "__main__":
    app()
