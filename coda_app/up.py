"""``coda up``: the whole loop on one machine (embedded stores, the master, the model services,
a local worker, the trainer, a demo batch) and its live view."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import httpx
import typer
from rich.console import Console

from coda.logging import configure_logging, get_logger
from coda_app.cli_options import DEFAULT_HOME, LogFormat, LogFormatOption, json_logs
from coda_app.embedded.postgres import EmbeddedPostgres
from coda_app.embedded.redis import EmbeddedRedis
from coda_app.secrets_file import LocalSecrets, local_secrets, secrets_path
from coda_app.stack_shape import StackShape
from coda_app.supervise import Child, GaveUp, Supervisor

if TYPE_CHECKING:
    import uvicorn

    from coda_app.embedded.services import ServiceUrls
    from coda_app.stack import Stack

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


@dataclass(frozen=True, kw_only=True)
class UpOptions(StackShape):
    """What one ``coda up`` runs (the command's options, checked): the stack's shape, where
    the master listens, the demo batch and the live view."""

    home: Path
    host: str = "127.0.0.1"
    port: int = 8000
    demo: bool = True
    demo_rollouts: int = 2
    master_only: bool = False
    live: bool | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def options_problem(models: str, *, vllm: bool, urls: Sequence[str | None]) -> str | None:
    """Why these options cannot run together (None: they can)."""
    if models not in ("tiny", "replay"):
        return f"--models: 'tiny' or 'replay', not {models!r}"
    if vllm and (models != "tiny" or any(urls)):
        return "--vllm serves the tiny model: not with --models replay or --*-url"
    return None


class UpStack:
    """One ``coda up`` over its stores: the master (uvicorn), the supervised children (the
    embedded stores; the model services, worker and trainer of :class:`coda_app.stack.Stack`
    unless master-only), the demo batch and the live view. :meth:`run` serves until Ctrl-C,
    SIGTERM or a child that keeps dying, then stops everything it started."""

    def __init__(self, opts: UpOptions, tokens: LocalSecrets, stores: ServiceUrls) -> None:
        import uvicorn

        from master.app import create_app
        from master.settings import MasterSettings

        self.opts = opts
        self.tokens = tokens
        self.supervisor = Supervisor(store_children(stores.servers))
        settings = MasterSettings(
            database_url=stores.database_url, redis_url=stores.redis_url,
            admin_token=tokens.admin_token, worker_tokens=[tokens.worker_token],
            artifacts_url=str(opts.home / "artifacts"),
            coverage_file=_local_coverage(opts.home))
        self.server = _master_server(uvicorn.Config(
            create_app(settings, supervised=self.supervisor.status), host=opts.host,
            port=opts.port, log_config=None, access_log=False), before_exit=self._stop_stack)
        self.stack = None if opts.master_only else _model_stack(opts, tokens)
        self.gave_up: GaveUp | None = None
        self._stack_up = False  # started in full: stopped before the master on Ctrl-C
        self._stack_stopped = False
        self._stop_lock = threading.Lock()

    @property
    def admin_token(self) -> str:
        return self.tokens.admin_token.get_secret_value()

    def run(self) -> bool:
        """Serve until asked to stop; stop everything; False when a child kept dying."""
        try:
            # uvicorn re-raises the Ctrl-C it handled; we are stopping anyway
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(self._serve())
        finally:
            self._stop_stack(started_or_not=True)
        return self.gave_up is None

    def _stop_stack(self, *, started_or_not: bool = False) -> None:
        """Stop the worker, trainer and model services, once. While the master still serves
        (Ctrl-C, SIGTERM, a child that keeps dying: called before the master stops) only a
        stack that is up; after the master stopped (``started_or_not``) whatever started."""
        with self._stop_lock:
            if self.stack is None or self._stack_stopped:
                return
            if not (self._stack_up or started_or_not):
                return
            self._stack_stopped = True
            self.supervisor.close()
            console.print("stopping the worker, trainer and model services ...")
            self.stack.stop()

    async def _serve(self) -> None:
        """The run loop: the master first; once it listens, the supervision, the model
        stack, the demo batch and the live view; until the master stops."""
        serving = asyncio.create_task(self.server.serve())
        while not self.server.started and not serving.done():
            await asyncio.sleep(0.1)
        if not self.server.started:
            await serving
            return
        watching = asyncio.create_task(self._supervise())
        self._announce()
        view = None
        try:
            if self.stack is not None and not await self._start_stack(self.stack, serving):
                return
            if self.opts.demo:
                await _submit_demo(self.opts.url, self.admin_token, self.opts.demo_rollouts,
                                   self.opts.models if self.stack is not None else "scienceboard")
            show = console.is_terminal if self.opts.live is None else self.opts.live
            view = asyncio.create_task(_watch(self.opts.url, self.admin_token,
                                              self.supervisor, show))
            await serving
        finally:
            self.supervisor.close()
            watching.cancel()
            if view is not None:
                view.cancel()
            if not serving.done():
                self.server.should_exit = True
                await serving

    def _announce(self) -> None:
        url, home = self.opts.url, self.opts.home
        console.print(f"[green]CODA master up[/] at {url}  (dashboard: {url}/)")
        console.print(f"tokens in {secrets_path(home)}; logs in {home / 'logs'}; "
                      "Ctrl-C stops everything")

    async def _start_stack(self, stack: Stack, serving: asyncio.Task[None]) -> bool:
        """Start the model services, the worker and the trainer, and supervise them; False
        when the master stopped first (Ctrl-C while starting: what started is stopped)."""
        trainer = self.opts.train
        console.print("starting the model services, the worker"
                      + (" and the trainer" if trainer else "") + " ...")
        starting = asyncio.create_task(asyncio.to_thread(stack.start))
        await asyncio.wait({starting, serving}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            stack.request_stop()
            try:
                await starting
            except (RuntimeError, OSError, ValueError) as exc:  # a start cut short
                log.info("stack.start_interrupted", error=str(exc))
            return False
        starting.result()  # a service that could not start: its error
        self.supervisor.children += stack.children()
        self._stack_up = True
        console.print("[green]model services, worker" + (", trainer" if trainer else "")
                      + " up[/]")
        return True

    async def _supervise(self) -> None:
        """Restart what died (backoff); one that keeps dying stops everything."""
        try:
            while True:
                try:
                    await asyncio.to_thread(self.supervisor.check)
                except GaveUp:
                    raise
                except Exception:  # the loop's top: logged, the next round retries
                    log.exception("stack.supervise_failed")
                await asyncio.sleep(SUPERVISE_INTERVAL_S)
        except GaveUp as exc:
            self.gave_up = exc
            console.print(f"[red]{exc}; stopping everything. The end of its log:[/]\n"
                          f"{exc.tail}")
            await asyncio.to_thread(self._stop_stack)
            self.server.should_exit = True


def _master_server(config: uvicorn.Config, before_exit: Callable[[], None]) -> uvicorn.Server:
    """uvicorn's server whose Ctrl-C / SIGTERM first runs ``before_exit`` (stopping the
    worker, trainer and model services) while the master still serves, so a draining worker
    gives its jobs back to a live master instead of retrying against a dead one; then the
    master stops. A second signal stops the master at once (uvicorn's own handling)."""
    import uvicorn

    class MasterServer(uvicorn.Server):
        stopping = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if self.stopping or self.should_exit:
                super().handle_exit(sig, frame)
                return
            self.stopping = True
            threading.Thread(target=self.stop_then_exit, args=(sig, frame),
                             name="coda-up-stop", daemon=True).start()

        def stop_then_exit(self, sig: int, frame: FrameType | None) -> None:
            try:
                before_exit()
            except Exception:  # the master stops all the same; run() stops what is left
                log.exception("stack.stop_failed")
            finally:
                if not self.should_exit:
                    super().handle_exit(sig, frame)

    return MasterServer(config)


def _model_stack(opts: UpOptions, tokens: LocalSecrets) -> Stack:
    from coda_app.stack import Stack, StackConfig

    return Stack(StackConfig(
        **opts.shape(), home=opts.home, master_url=opts.url, admin_token=tokens.admin_token,
        worker_token=tokens.worker_token, service_token=tokens.service_token,
        service_admin_token=tokens.service_admin_token))


def up(
    home: Annotated[Path, typer.Option(help="data dir: Postgres, Redis, artifacts")] = DEFAULT_HOME,
    host: Annotated[str, typer.Option(help="bind address of the master")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port of the master")] = 8000,
    models: ModelsChoice = "tiny",
    planner_model: Annotated[str | None, typer.Option(
        help="planner model directory (or served name with --planner-url)")] = None,
    executor_model: Annotated[str | None, typer.Option(
        help="executor model directory, or 'ocr': plans grounded by OCR (no weights)")] = None,
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
    from coda_app.embedded import embedded_services, exit_on_sigterm

    problem = options_problem(models, vllm=vllm, urls=(planner_url, executor_url, judge_url))
    if problem:
        console.print(f"[red]{problem}[/]")
        raise typer.Exit(2)
    configure_logging(os.environ.get("CODA_LOG_LEVEL", "INFO"), json_logs=json_logs(log_format))
    opts = UpOptions(
        home=home.resolve(), host=host, port=port, models=models,  # type: ignore[arg-type]
        model_dirs={"planner": planner_model, "executor": executor_model,
                    "judge": judge_model},
        model_urls={"planner": planner_url, "executor": executor_url, "judge": judge_url},
        slots=slots, train=train, vllm=vllm, demo=wants_demo(demo, master_only=master_only),
        demo_rollouts=demo_rollouts, master_only=master_only, live=live)
    tokens = local_secrets(opts.home)
    exit_on_sigterm()  # SIGTERM, like Ctrl-C, stops everything
    with embedded_services(opts.home) as stores:
        ok = UpStack(opts, tokens, stores).run()
    console.print(f"stopped: everything (data kept in {opts.home})")
    if not ok:
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
