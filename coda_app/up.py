"""``coda up``: the whole loop on one machine (embedded stores, the master, the model services,
a local worker, the trainer, a demo batch) and its live view."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console

from coda.logging import configure_logging, get_logger
from coda_app.cli_options import DEFAULT_HOME, LogFormat, LogFormatOption, json_logs
from coda_app.embedded.postgres import EmbeddedPostgres
from coda_app.embedded.redis import EmbeddedRedis
from coda_app.secrets_file import local_secrets
from coda_app.supervise import Child, GaveUp, Supervisor

console = Console(stderr=True)
log = get_logger("coda_app.up")

DEMO_TASKS = Path(__file__).resolve().parent.parent / "examples" / "scienceboard"

ModelsChoice = Annotated[str, typer.Option(
    "--models", help="tiny: the tiny random Qwen2.5-VL for all three roles (runs anywhere, "
    "garbage output); replay: recorded outputs for the bundled TeXstudio task C-02, so the "
    "whole loop runs and the trainer publishes versions", case_sensitive=False)]


def _local_coverage(home: Path) -> str | None:
    """The bundled tasks' coverage on this machine's local image, written for the dashboard
    (``home/coverage-local.json``); None on a master without the worker package."""
    if importlib.util.find_spec("worker") is None:
        return None
    from worker.tasks.coverage import coverage

    report = coverage(DEMO_TASKS, "local")
    report.folder = "examples/scienceboard"
    out = home / "coverage-local.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report.model_dump_json(indent=2) + "\n")
    return str(out)


SUPERVISE_INTERVAL_S = 1.0
"""How often ``coda up`` looks for a child that died."""


def wants_demo(demo: bool | None, *, master_only: bool) -> bool:
    """Whether ``coda up`` submits the demo batch: when asked (``--demo`` / ``--no-demo``),
    else on a whole stack, never on a master for remote VM servers (``--master-only``)."""
    return demo if demo is not None else not master_only


def store_children(servers: Sequence[EmbeddedPostgres | EmbeddedRedis]) -> list[Child]:
    """The embedded stores as supervised children (restarted on their ports)."""
    out = []
    for server in servers:
        if isinstance(server, EmbeddedPostgres):
            out.append(Child("postgres", server.alive, server.restart, server.logfile))
        else:
            out.append(Child("redis", server.alive, server.restart, server.logfile))
    return out


def up(
    home: Annotated[Path, typer.Option(help="data dir: Postgres, Redis, artifacts")] = DEFAULT_HOME,
    host: Annotated[str, typer.Option(help="bind address of the master")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port of the master")] = 8000,
    models: ModelsChoice = "tiny",
    planner_model: Annotated[str | None, typer.Option(
        help="planner model directory (or served name with --planner-url)")] = None,
    executor_model: Annotated[str | None, typer.Option(help="executor model")] = None,
    judge_model: Annotated[str | None, typer.Option(help="judge model")] = None,
    planner_url: Annotated[str | None, typer.Option(
        help="an OpenAI-compatible server (vLLM) serving the planner")] = None,
    executor_url: Annotated[str | None, typer.Option(help="... serving the executor")] = None,
    judge_url: Annotated[str | None, typer.Option(help="... serving the judge")] = None,
    slots: Annotated[int, typer.Option(help="local desktop slots (Xvfb)")] = 2,
    train: Annotated[bool, typer.Option(help="run the trainer (decoupled GRPO)")] = False,
    vllm: Annotated[bool, typer.Option(
        "--vllm", help="serve the tiny model with vLLM's own servers (scripts/vllm-install.sh; "
        "one for the planner, one shared by the executor and the judge); the planner pulls "
        "the trainer's versions from the master")] = False,
    demo: Annotated[bool | None, typer.Option(
        help="submit the demo batch once (default: yes, but not with --master-only, a master "
        "for remote VM servers, whose fleet would run it)")] = None,
    demo_rollouts: Annotated[int, typer.Option(help="rollouts per demo task")] = 2,
    master_only: Annotated[bool, typer.Option(
        help="only the master (no model services, worker or trainer)")] = False,
    live: Annotated[bool | None, typer.Option(
        help="live view (default: on a terminal)")] = None,
    log_format: LogFormatOption = LogFormat.AUTO,
) -> None:
    """The whole loop on one machine: embedded Postgres and Redis, the master, the planner /
    executor / judge services, a local worker with Xvfb slots, the trainer (--train) and a
    demo batch. Ctrl-C stops everything; the next start keeps the data."""
    import uvicorn

    from coda_app.embedded import embedded_services, exit_on_sigterm
    from master.app import create_app
    from master.settings import MasterSettings

    if models not in ("tiny", "replay"):
        console.print(f"[red]--models: 'tiny' or 'replay', not {models!r}[/]")
        raise typer.Exit(2)
    if vllm and (models != "tiny" or planner_url or executor_url or judge_url):
        console.print("[red]--vllm serves the tiny model: not with --models replay or --*-url[/]")
        raise typer.Exit(2)
    configure_logging(os.environ.get("CODA_LOG_LEVEL", "INFO"), json_logs=json_logs(log_format))
    demo = wants_demo(demo, master_only=master_only)
    home = home.resolve()
    tokens = local_secrets(home)
    exit_on_sigterm()  # SIGTERM, like Ctrl-C, stops everything
    with embedded_services(home) as urls:
        settings = MasterSettings(
            database_url=urls.database_url, redis_url=urls.redis_url,
            admin_token=tokens.admin_token, worker_tokens=[tokens.worker_token],
            artifacts_url=str(home / "artifacts"), coverage_file=_local_coverage(home))
        supervisor = Supervisor(store_children(urls.servers))
        server = uvicorn.Server(uvicorn.Config(
            create_app(settings, supervised=supervisor.status), host=host, port=port,
            log_config=None, access_log=False))
        gave_up: list[GaveUp] = []
        url = f"http://{host}:{port}"
        stack = None
        if not master_only:
            from coda_app.stack import Stack, StackConfig

            stack = Stack(StackConfig(
                home=home, master_url=url, admin_token=tokens.admin_token,
                worker_token=tokens.worker_token, service_token=tokens.service_token,
                service_admin_token=tokens.service_admin_token,
                models=models,  # type: ignore[arg-type]
                model_dirs={"planner": planner_model, "executor": executor_model,
                            "judge": judge_model},
                model_urls={"planner": planner_url, "executor": executor_url,
                            "judge": judge_url}, slots=slots, train=train, vllm=vllm))

        async def supervise() -> None:
            """Restart what died (backoff); one that keeps dying stops everything."""
            try:
                while True:
                    try:
                        await asyncio.to_thread(supervisor.check)
                    except GaveUp:
                        raise
                    except Exception:  # the loop's top: logged, the next round retries
                        log.exception("stack.supervise_failed")
                    await asyncio.sleep(SUPERVISE_INTERVAL_S)
            except GaveUp as exc:
                gave_up.append(exc)
                console.print(f"[red]{exc}; stopping everything. The end of its log:[/]\n"
                              f"{exc.tail}")
                server.should_exit = True

        async def serve() -> None:
            task = asyncio.create_task(server.serve())
            while not server.started and not task.done():
                await asyncio.sleep(0.1)
            if not server.started:
                await task
                return
            watching = asyncio.create_task(supervise())
            console.print(f"[green]CODA master up[/] at {url}  (dashboard: {url}/)")
            console.print(f"tokens in {home / 'secrets.json'}; logs in {home / 'logs'}; "
                          "Ctrl-C stops everything")
            view = None
            try:
                if stack is not None:
                    console.print("starting the model services, the worker"
                                  + (" and the trainer" if train else "") + " ...")
                    starting = asyncio.create_task(asyncio.to_thread(stack.start))
                    await asyncio.wait({starting, task}, return_when=asyncio.FIRST_COMPLETED)
                    if not starting.done():  # Ctrl-C while starting: stop what started
                        stack.request_stop()
                        try:
                            await starting
                        except (RuntimeError, OSError, ValueError) as exc:  # a start cut short
                            log.info("stack.start_interrupted", error=str(exc))
                        return
                    starting.result()  # a service that could not start: its error
                    supervisor.children += stack.children()
                    console.print("[green]model services, worker"
                                  + (", trainer" if train else "") + " up[/]")
                if demo:
                    await _submit_demo(url, tokens.admin_token.get_secret_value(), demo_rollouts,
                                       models if stack is not None else "scienceboard")
                show = console.is_terminal if live is None else live
                view = asyncio.create_task(_watch(url, tokens.admin_token.get_secret_value(),
                                                  supervisor, show))
                await task
            finally:
                supervisor.close()
                watching.cancel()
                if view is not None:
                    view.cancel()
                if not task.done():
                    server.should_exit = True
                    await task

        try:
            # uvicorn re-raises the Ctrl-C it handled; we are stopping anyway
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(serve())
        finally:
            supervisor.close()
            if stack is not None:
                console.print("stopping the worker, trainer and model services ...")
                stack.stop()
    console.print("stopped: everything (data kept in " + str(home) + ")")
    if gave_up:
        raise typer.Exit(1)


async def _watch(url: str, token: str, supervisor: Supervisor, show: bool) -> None:
    """Redraw the live view every 2 s (or log a line every 15 s when not on a terminal)."""
    from rich.live import Live

    from coda.clients.base import ServiceError
    from coda.clients.master import MasterClient
    from coda.contracts.training import ModelRole
    from coda_app.liveview import one_line, render

    async with MasterClient(url, token=token) as client:
        async def snapshot() -> tuple[object, str | None]:
            report = await client.status()
            try:
                version: str | None = (await client.current_version(ModelRole.PLANNER)).name
            except ServiceError:
                version = None
            return report, version

        problems = supervisor.report
        if not show:
            while True:
                report, version = await snapshot()
                log.info("coda.up", summary=one_line(report, version),  # type: ignore[arg-type]
                         restarts=problems())
                await asyncio.sleep(15)
        with Live(console=console, refresh_per_second=1) as view:
            while True:
                with contextlib.suppress(ServiceError, httpx.HTTPError):
                    report, version = await snapshot()
                    view.update(render(report, url=url, planner_version=version,  # type: ignore[arg-type]
                                       problems=problems()))
                await asyncio.sleep(2)


async def _submit_demo(url: str, token: str, rollouts: int, kind: str) -> None:
    from coda.clients.master import MasterClient
    from coda.contracts.master_api import BatchCreate
    from coda.tasks import load_tasks

    name = "scienceboard-demo" if kind == "scienceboard" else f"demo-{kind}"
    async with MasterClient(url, token=token) as client:
        existing = await client.list_batches(limit=200)
        if any(b.name == name for b in existing.items):
            console.print("demo batch already submitted (kept from the last start)")
            return
        if kind == "replay":
            from coda_app.stack import REPLAY_TASKS

            tasks = [t for path in REPLAY_TASKS for t in load_tasks(path)]
        elif kind == "tiny":
            from coda_app.stack import TINY_DEMO_TASKS

            tasks = [t for path in TINY_DEMO_TASKS for t in load_tasks(path)]
        else:
            tasks = load_tasks(DEMO_TASKS)
        created = await client.create_batch(BatchCreate(
            name=name, tasks=[t.model_dump(mode="json") for t in tasks], rollouts=rollouts))
        console.print(f"submitted demo batch {created.batch.id}: {len(tasks)} tasks "
                      f"x {rollouts} rollouts = {created.batch.progress.total} episodes")
