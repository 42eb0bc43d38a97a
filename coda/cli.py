"""The ``coda`` command line (Typer): one entry point for every role."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import httpx
import typer
from rich.console import Console
from rich.table import Table

from coda.logging import configure_logging, get_logger

if TYPE_CHECKING:
    from coda.clients.master import MasterClient

T = TypeVar("T")

app = typer.Typer(help="CODA: run, judge and train computer-use agents for scientific software.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)
console = Console(stderr=True)
log = get_logger("coda.cli")

class LogFormat(StrEnum):
    AUTO = "auto"
    CONSOLE = "console"
    JSON = "json"


LogFormatOption = Annotated[LogFormat, typer.Option(
    "--log-format", envvar="CODA_LOG_FORMAT", case_sensitive=False,
    help="auto: human-readable lines on a terminal, JSON lines otherwise")]


def _json_logs(fmt: LogFormat) -> bool | None:
    return {LogFormat.AUTO: None, LogFormat.CONSOLE: False, LogFormat.JSON: True}[fmt]


DEFAULT_HOME = Path(os.environ.get("CODA_HOME", ".coda"))
DEFAULT_URL = os.environ.get("CODA_MASTER_URL", "http://127.0.0.1:8000")
DEMO_TASKS = Path(__file__).resolve().parent.parent / "examples" / "scienceboard"


def _register_service_clis() -> None:
    """Model services and tools bring their own Typer apps; load those installed."""
    for name, module, help_text in (
        ("planner", "planner_service.cli", "The planner service (next-step thoughts)."),
        ("executor", "executor_service.cli", "The executor service (thought -> action)."),
        ("judge", "judge_service.cli", "The judge service (trajectory verdicts)."),
        ("tasks", "coda.taskgen.cli", "Task generation (auto exploration)."),
        ("trainer", "trainer.cli", "Decoupled GRPO on the planner (stage 1)."),
        ("dataset", "trainer.dataset_cli", "Stage-2 datasets of judged trajectories."),
        ("train", "trainer.train_cli", "Supervised fine-tuning of a generalist planner (stage 2)."),
    ):
        try:
            sub = __import__(module, fromlist=["app"]).app
        except ImportError as exc:  # an extra not installed: say so when used
            from coda.modelservice.imports import missing_package

            if missing_package(exc) is None:
                raise  # a real import error inside CODA: reported as it is
            missing = str(exc)

            def _missing(name: str = name, missing: str = missing) -> None:
                console.print(f"[red]coda {name} is not available:[/] {missing}")
                raise typer.Exit(2)

            sub = typer.Typer(help=f"{help_text} (not installed)")
            sub.callback(invoke_without_command=True)(_missing)
        app.add_typer(sub, name=name, help=help_text)


def _secrets(home: Path) -> dict[str, str]:
    """Tokens for a local `coda up`, generated on first start and kept in the data dir."""
    path = home / "secrets.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    home.mkdir(parents=True, exist_ok=True)
    values = {"admin_token": secrets.token_urlsafe(24), "worker_token": secrets.token_urlsafe(24)}
    path.write_text(json.dumps(values, indent=2))
    path.chmod(0o600)
    return values


def _admin_token(token: str | None, home: Path) -> str | None:
    if token:
        return token
    if os.environ.get("CODA_ADMIN_TOKEN"):
        return os.environ["CODA_ADMIN_TOKEN"]
    path = home / "secrets.json"
    return str(json.loads(path.read_text())["admin_token"]) if path.exists() else None


def _call_master(url: str, token: str | None,
                 call: Callable[[MasterClient], Awaitable[T]]) -> T:
    """Run one client call; a refusal or an unreachable master is a clear message and exit 1."""
    from coda.clients.base import ServiceError
    from coda.clients.master import MasterClient

    async def go() -> T:
        async with MasterClient(url, token=token) as client:
            return await call(client)

    try:
        return asyncio.run(go())
    except ServiceError as exc:
        console.print(f"[red]master refused the request ({exc.status}):[/] {exc.detail}")
        raise typer.Exit(1) from exc
    except (OSError, httpx.TransportError) as exc:
        console.print(f"[red]cannot reach the master at {url}:[/] {exc}")
        raise typer.Exit(1) from exc


@app.command()
def master(
    host: Annotated[str, typer.Option(help="bind address")] = "0.0.0.0",
    port: Annotated[int, typer.Option(help="bind port")] = 8000,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes")] = 1,
    log_format: LogFormatOption = LogFormat.AUTO,
) -> None:
    """Serve the master on the configured Postgres and Redis (CODA_* / DATABASE_URL / REDIS_URL)."""
    import uvicorn

    from master.settings import DefaultSecretError, MasterSettings

    settings = MasterSettings()
    configure_logging(settings.log_level, json_logs=_json_logs(log_format))
    try:
        settings.check_secrets()
    except DefaultSecretError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    uvicorn.run("master.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_config=None, access_log=False)


@app.command()
def up(
    home: Annotated[Path, typer.Option(help="data dir: Postgres, Redis, artifacts")] = DEFAULT_HOME,
    host: Annotated[str, typer.Option(help="bind address of the master")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port of the master")] = 8000,
    demo: Annotated[bool, typer.Option(help="submit the ScienceBoard demo batch once")] = True,
    demo_rollouts: Annotated[int, typer.Option(help="rollouts per demo task")] = 8,
    log_format: LogFormatOption = LogFormat.AUTO,
) -> None:
    """Start everything on embedded defaults: Postgres, Redis, the master (Ctrl-C stops all)."""
    import uvicorn

    from coda.embedded import embedded_services, exit_on_sigterm
    from master.app import create_app
    from master.settings import MasterSettings

    configure_logging(os.environ.get("CODA_LOG_LEVEL", "INFO"), json_logs=_json_logs(log_format))
    home = home.resolve()
    tokens = _secrets(home)
    exit_on_sigterm()  # SIGTERM, like Ctrl-C, stops the master and then Postgres and Redis
    with embedded_services(home) as urls:
        settings = MasterSettings(
            database_url=urls.database_url, redis_url=urls.redis_url,
            admin_token=tokens["admin_token"], worker_tokens=[tokens["worker_token"]],
            artifacts_url=str(home / "artifacts"))
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port,
                                               log_config=None, access_log=False))

        async def serve() -> None:
            task = asyncio.create_task(server.serve())
            while not server.started and not task.done():
                await asyncio.sleep(0.1)
            if server.started:
                url = f"http://{host}:{port}"
                console.print(f"[green]CODA master up[/] at {url}  (status page: {url}/)")
                console.print(f"tokens in {home / 'secrets.json'}; Ctrl-C stops everything")
                if demo:
                    await _submit_demo(url, tokens["admin_token"], demo_rollouts)
            await task

        # uvicorn re-raises the Ctrl-C it handled; we are stopping anyway
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve())
    console.print("stopped: master, Postgres and Redis")


async def _submit_demo(url: str, token: str, rollouts: int) -> None:
    from coda.clients.master import MasterClient
    from coda.contracts.master_api import BatchCreate
    from coda.tasks import load_tasks

    async with MasterClient(url, token=token) as client:
        existing = await client.list_batches(limit=200)
        if any(b.name == "scienceboard-demo" for b in existing.items):
            console.print("demo batch already submitted (kept from the last start)")
            return
        tasks = load_tasks(DEMO_TASKS)
        created = await client.create_batch(BatchCreate(
            name="scienceboard-demo", tasks=[t.model_dump(mode="json") for t in tasks],
            rollouts=rollouts))
        console.print(f"submitted demo batch {created.batch.id}: {len(tasks)} ScienceBoard tasks "
                      f"x {rollouts} rollouts = {created.batch.progress.total} episodes")


@app.command()
def submit(
    path: Annotated[Path, typer.Argument(help="task file (JSON / JSONL) or a directory of them")],
    rollouts: Annotated[int, typer.Option("--rollouts", "-k", help="rollouts per task")] = 1,
    priority: Annotated[int, typer.Option(help="higher runs first")] = 0,
    name: Annotated[str | None, typer.Option(help="batch name")] = None,
    url: Annotated[str, typer.Option(help="master URL (CODA_MASTER_URL)")] = DEFAULT_URL,
    token: Annotated[str | None, typer.Option(help="admin token (CODA_ADMIN_TOKEN)")] = None,
    home: Annotated[Path, typer.Option(help="data dir of a local `coda up`")] = DEFAULT_HOME,
) -> None:
    """Submit tasks as a batch of episodes."""
    from coda.contracts.master_api import BatchCreate
    from coda.tasks import TaskLoadError, load_tasks

    try:
        tasks = load_tasks(path)
    except TaskLoadError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    if not tasks:
        console.print(f"[red]{path}: no task files found[/]")
        raise typer.Exit(2)

    spec = BatchCreate(name=name or path.name, tasks=[t.model_dump(mode="json") for t in tasks],
                       rollouts=rollouts, priority=priority)
    created = _call_master(url, _admin_token(token, home), lambda m: m.create_batch(spec))
    typer.echo(json.dumps({"batch_id": str(created.batch.id),
                           "episodes": created.batch.progress.total}))


@app.command()
def status(
    url: Annotated[str, typer.Option(help="master URL (CODA_MASTER_URL)")] = DEFAULT_URL,
    token: Annotated[str | None, typer.Option(help="token, if the status is token-gated")] = None,
    home: Annotated[Path, typer.Option(help="data dir of a local `coda up`")] = DEFAULT_HOME,
    as_json: Annotated[bool, typer.Option("--json", help="print the raw JSON")] = False,
) -> None:
    """Show batches, scores (Average@k / Pass@k), queues and workers."""
    report = _call_master(url, _admin_token(token, home), lambda m: m.status())
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    out = Console()
    t = Table(title="Batches")
    for col in ("batch", "name", "status", "done/total", "running", "queued", "succeeded"):
        t.add_column(col)
    for b in report.batches:
        p = b.progress
        t.add_row(str(b.id)[:8], b.name or "", b.status.value,
                  f"{p.completed + p.failed + p.cancelled}/{p.total}", str(p.running),
                  str(p.queued), str(p.succeeded))
    out.print(t)
    s = Table(title="Success rate (%)")
    for col in ("app", "tasks", "rollouts", "Average@k", "Pass@k"):
        s.add_column(col)
    for row in report.scores:
        s.add_row(row.app, str(row.tasks), str(row.rollouts), f"{row.average_at_k:.2f}",
                  f"{row.pass_at_k:.2f}")
    out.print(s)
    q = Table(title="Queues")
    for col in ("kind", "queued", "leased"):
        q.add_column(col)
    for d in report.queues:
        q.add_row(d.kind.value, str(d.queued), str(d.leased))
    out.print(q)
    out.print(f"workers: {len(report.workers)}")


_register_service_clis()
app.add_typer(__import__("worker.guest.cli", fromlist=["app"]).app, name="guest")

if __name__ == "__main__":  # pragma: no cover
    app()
