"""The ``coda`` command line (Typer): one entry point for every role."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import secrets
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import httpx
import typer
from pydantic import SecretStr
from rich.console import Console
from rich.table import Table

from coda.logging import configure_logging, get_logger
from coda_app.vllm import app as _vllm_app

if TYPE_CHECKING:
    from coda.clients.master import MasterClient
    from coda.tasks import TaskSpec

T = TypeVar("T")

app = typer.Typer(help="CODA: run, judge and train computer-use agents for scientific software.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)
console = Console(stderr=True)
log = get_logger("coda_app.cli")

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
    """Model services and tools bring their own Typer apps; load those installed (an image
    holds only its roles' packages: the others are commands that say they are not installed)."""
    for name, module, help_text in (
        ("planner", "planner_service.cli", "The planner service (next-step thoughts)."),
        ("executor", "executor_service.cli", "The executor service (thought -> action)."),
        ("judge", "judge_service.cli", "The judge service (trajectory verdicts)."),
        ("worker", "worker.cli", "The VM-host worker (episodes, judge and group jobs)."),
        ("tasks", "coda.taskgen.cli", "Task generation (auto exploration)."),
        ("trainer", "trainer.cli", "Decoupled GRPO on the planner (stage 1)."),
        ("dataset", "trainer.dataset_cli", "Stage-2 datasets of judged trajectories."),
        ("train", "trainer.train_cli", "Supervised fine-tuning of a generalist planner (stage 2)."),
        ("guest", "worker.guest.cli",
         "The guest agent that runs on each desktop (OSWorld-compatible)."),
    ):
        package = module.split(".", 1)[0]
        if importlib.util.find_spec(package) is None:  # an image without this role
            missing = f"the {package} package is not installed"
        else:
            try:
                sub = __import__(module, fromlist=["app"]).app
            except ImportError as exc:  # an extra not installed: say so when used
                from coda.modelservice.imports import missing_package

                if missing_package(exc) is None:
                    raise  # a real import error inside CODA: reported as it is
                missing = str(exc)
            else:
                if name == "tasks":
                    _add_coverage(sub)
                app.add_typer(sub, name=name, help=help_text)
                continue
        app.add_typer(_unavailable(name, missing), name=name,
                      help=f"{help_text} (not installed)")


def _add_coverage(tasks: typer.Typer) -> None:
    """``coda tasks coverage`` comes from the worker's task package (where setup steps and
    checkers live), when it is installed."""
    if importlib.util.find_spec("worker") is None:
        return
    from worker.tasks.coverage_cli import app as coverage_app

    tasks.add_typer(coverage_app)


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


def _unavailable(name: str, missing: str) -> typer.Typer:
    """A command that says why it is not available here (exit 2)."""

    def _missing() -> None:
        console.print(f"[red]coda {name} is not available:[/] {missing}")
        raise typer.Exit(2)

    sub = typer.Typer()
    sub.callback(invoke_without_command=True)(_missing)
    return sub


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


def _task_files(path: Path) -> list[TaskSpec]:
    """The tasks of a file or directory; an unreadable or empty one is a message and exit 2."""
    from coda.tasks import TaskLoadError, load_tasks

    try:
        tasks = load_tasks(path)
    except TaskLoadError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    if not tasks:
        console.print(f"[red]{path}: no task files found[/]")
        raise typer.Exit(2)
    return tasks


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


ModelsChoice = Annotated[str, typer.Option(
    "--models", help="tiny: the tiny random Qwen2.5-VL for all three roles (runs anywhere, "
    "garbage output); replay: recorded outputs for the bundled TeXstudio task C-02, so the "
    "whole loop runs and the trainer publishes versions", case_sensitive=False)]


def _secrets_full(home: Path) -> dict[str, str]:
    """The local tokens, with the model services' tokens added on first need."""
    values = _secrets(home)
    if "service_token" not in values:
        values.update(service_token=secrets.token_urlsafe(24),
                      service_admin_token=secrets.token_urlsafe(24))
        path = home / "secrets.json"
        path.write_text(json.dumps(values, indent=2))
        path.chmod(0o600)
    return values


@app.command()
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
    demo: Annotated[bool, typer.Option(help="submit the demo batch once")] = True,
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

    from coda.embedded import embedded_services, exit_on_sigterm
    from master.app import create_app
    from master.settings import MasterSettings

    if models not in ("tiny", "replay"):
        console.print(f"[red]--models: 'tiny' or 'replay', not {models!r}[/]")
        raise typer.Exit(2)
    if vllm and (models != "tiny" or planner_url or executor_url or judge_url):
        console.print("[red]--vllm serves the tiny model: not with --models replay or --*-url[/]")
        raise typer.Exit(2)
    configure_logging(os.environ.get("CODA_LOG_LEVEL", "INFO"), json_logs=_json_logs(log_format))
    home = home.resolve()
    tokens = _secrets_full(home)
    exit_on_sigterm()  # SIGTERM, like Ctrl-C, stops everything
    with embedded_services(home) as urls:
        settings = MasterSettings(
            database_url=urls.database_url, redis_url=urls.redis_url,
            admin_token=tokens["admin_token"], worker_tokens=[tokens["worker_token"]],
            artifacts_url=str(home / "artifacts"), coverage_file=_local_coverage(home))
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port,
                                               log_config=None, access_log=False))
        url = f"http://{host}:{port}"
        stack = None
        if not master_only:
            from coda_app.stack import Stack, StackConfig

            stack = Stack(StackConfig(
                home=home, master_url=url, admin_token=SecretStr(tokens["admin_token"]),
                worker_token=SecretStr(tokens["worker_token"]),
                service_token=SecretStr(tokens["service_token"]),
                service_admin_token=SecretStr(tokens["service_admin_token"]),
                models=models,  # type: ignore[arg-type]
                model_dirs={"planner": planner_model, "executor": executor_model,
                            "judge": judge_model},
                model_urls={"planner": planner_url, "executor": executor_url,
                            "judge": judge_url}, slots=slots, train=train, vllm=vllm))

        async def serve() -> None:
            task = asyncio.create_task(server.serve())
            while not server.started and not task.done():
                await asyncio.sleep(0.1)
            if not server.started:
                await task
                return
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
                    console.print("[green]model services, worker"
                                  + (", trainer" if train else "") + " up[/]")
                if demo:
                    await _submit_demo(url, tokens["admin_token"], demo_rollouts,
                                       models if stack is not None else "scienceboard")
                show = console.is_terminal if live is None else live
                view = asyncio.create_task(_watch(url, tokens["admin_token"], stack, show))
                await task
            finally:
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
            if stack is not None:
                console.print("stopping the worker, trainer and model services ...")
                stack.stop()
    console.print("stopped: everything (data kept in " + str(home) + ")")


async def _watch(url: str, token: str, stack: object, show: bool) -> None:
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

        problems = (lambda: stack.dead()) if stack is not None else (  # type: ignore[attr-defined]
            lambda: [])
        if not show:
            while True:
                report, version = await snapshot()
                log.info("coda.up", summary=one_line(report, version),  # type: ignore[arg-type]
                         stopped=problems())
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


@app.command("eval")
def evaluate(
    path: Annotated[Path, typer.Argument(help="task file (JSON / JSONL) or a directory of them")],
    k: Annotated[int, typer.Option("--k", "-k", help="rollouts per task")] = 1,
    out_dir: Annotated[Path, typer.Option(help="where table1.csv and table1.json go")] = Path(
        "eval"),
    name: Annotated[str | None, typer.Option(help="batch name")] = None,
    judge: Annotated[str, typer.Option(
        help="judge jobs for the episodes: never, no_checker or always")] = "never",
    timeout: Annotated[float, typer.Option(help="seconds to wait for the batch")] = 86_400.0,
    url: Annotated[str, typer.Option(help="master URL (CODA_MASTER_URL)")] = DEFAULT_URL,
    token: Annotated[str | None, typer.Option(help="admin token (CODA_ADMIN_TOKEN)")] = None,
    home: Annotated[Path, typer.Option(help="data dir of a local `coda up`")] = DEFAULT_HOME,
) -> None:
    """k rollouts per task through the running system, then the paper's Table 1 (Average@k,
    Pass@k per app and overall): printed, and written as CSV and JSON."""
    from coda.contracts.records import JudgeMode
    from coda_app.evaluate import EvalTimeout, rich_table, run_eval, write_table

    tasks = _task_files(path)
    try:
        mode = JudgeMode(judge)
    except ValueError as exc:
        console.print(f"[red]--judge: never, no_checker or always, not {judge!r}[/]")
        raise typer.Exit(2) from exc
    if not 1 <= k <= 64:
        console.print("[red]--k: between 1 and 64[/]")
        raise typer.Exit(2)
    batch_name = name or f"eval-{path.name}-k{k}"
    out = Console()
    try:
        batch, rows = _call_master(url, _admin_token(token, home), lambda m: run_eval(
            m, tasks, k=k, name=batch_name, judge=mode, timeout_s=timeout, console=console))
    except EvalTimeout as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from exc
    out.print(rich_table(rows, k))
    for written in write_table(rows, out_dir, batch=batch, k=k):
        console.print(f"wrote {written}")


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

    tasks = _task_files(path)
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

app.add_typer(_vllm_app, name="vllm", help="vLLM's own server for a model role.")

if __name__ == "__main__":  # pragma: no cover
    app()
