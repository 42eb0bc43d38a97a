"""The ``coda`` command line (Typer): one entry point for every role."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import httpx
import typer
from rich.console import Console
from rich.table import Table

from coda.logging import configure_logging, get_logger
from coda_app.cli_options import DEFAULT_HOME, LogFormat, LogFormatOption, json_logs
from coda_app.secrets_file import admin_token
from coda_app.up import up
from coda_app.vcsim import app as _vcsim_app
from coda_app.vllm import app as _vllm_app

if TYPE_CHECKING:
    from coda.clients.master import MasterClient
    from coda.contracts.records import JudgeMode
    from coda.tasks import TaskSpec

T = TypeVar("T")

app = typer.Typer(help="CODA: run, judge and train computer-use agents for scientific software.",
                  no_args_is_help=True, pretty_exceptions_show_locals=False)
console = Console(stderr=True)
log = get_logger("coda_app.cli")

DEFAULT_URL = os.environ.get("CODA_MASTER_URL", "http://127.0.0.1:8000")


def _register_service_clis() -> None:
    """Model services and tools bring their own Typer apps; load those installed (an image
    holds only its roles' packages: the others are commands that say they are not installed)."""
    for name, module, help_text in (
        ("planner", "planner_service.cli", "The planner service (next-step thoughts)."),
        ("executor", "executor_service.cli", "The executor service (thought -> action)."),
        ("judge", "judge_service.cli", "The judge service (trajectory verdicts)."),
        ("worker", "worker.cli", "The VM-host worker (episodes, judge and group jobs)."),
        ("tasks", "coda_app.taskgen.cli", "Task generation (auto exploration)."),
        ("trainer", "trainer.grpo.cli", "Decoupled GRPO on the planner (stage 1)."),
        ("dataset", "trainer.sft.dataset_cli", "Stage-2 datasets of judged trajectories."),
        ("train", "trainer.sft.cli", "Supervised fine-tuning of a generalist planner (stage 2)."),
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


def _unavailable(name: str, missing: str) -> typer.Typer:
    """A command that says why it is not available here (exit 2)."""

    def _missing() -> None:
        console.print(f"[red]coda {name} is not available:[/] {missing}")
        raise typer.Exit(2)

    sub = typer.Typer()
    sub.callback(invoke_without_command=True)(_missing)
    return sub


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
    configure_logging(settings.log_level, json_logs=json_logs(log_format))
    try:
        settings.check_secrets()
    except DefaultSecretError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    uvicorn.run("master.app:create_app", factory=True, host=host, port=port, workers=workers,
                log_config=None, access_log=False)


app.command()(up)


_LEARN_PACKAGES = ("worker", "trainer", "planner_service", "executor_service", "judge_service")


def _add_learn() -> None:
    """``coda learn`` needs the worker, the trainer and the model services (their packages
    and extras); an image without one of them has a ``learn`` that says which."""
    absent = [package for package in _LEARN_PACKAGES if importlib.util.find_spec(package) is None]
    reason = f"the {absent[0]} package is not installed" if absent else ""
    if not reason:
        try:
            from coda_app.learning.cli import learn
        except ImportError as exc:
            from coda.modelservice.imports import missing_package

            if missing_package(exc) is None:
                raise
            reason = str(exc)
    if reason:

        def learn_missing() -> None:
            """The closed loop (not installed here)."""
            console.print(f"[red]coda learn is not available:[/] {reason}")
            raise typer.Exit(2)

        app.command("learn")(learn_missing)
        return
    app.command("learn")(learn)


_add_learn()


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
    versions: Annotated[list[str] | None, typer.Option(
        "--versions", help="planner versions to compare side by side (repeat the option; "
        "'base' is the model without adapter)")] = None,
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
    if versions:
        _compare(tasks, versions, k=k, name=batch_name, judge=mode, timeout=timeout,
                 out_dir=out_dir, url=url, token=admin_token(token, home))
        return
    try:
        batch, rows = _call_master(url, admin_token(token, home), lambda m: run_eval(
            m, tasks, k=k, name=batch_name, judge=mode, timeout_s=timeout, console=console))
    except EvalTimeout as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from exc
    out.print(rich_table(rows, k))
    for written in write_table(rows, out_dir, batch=batch, k=k):
        console.print(f"wrote {written}")


def _compare(tasks: list[TaskSpec], versions: list[str], *, k: int, name: str, judge: JudgeMode,
             timeout: float, out_dir: Path, url: str, token: str | None) -> None:
    from coda_app.evaluate import EvalTimeout, compare_table, run_compare, write_compare

    if len(set(versions)) != len(versions):
        console.print("[red]--versions: each version once[/]")
        raise typer.Exit(2)
    try:
        evals = _call_master(url, token, lambda m: run_compare(
            m, tasks, versions, k=k, name=name, judge=judge, timeout_s=timeout,
            console=console))
    except EvalTimeout as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from exc
    Console().print(compare_table(evals, k))
    for written in write_compare(evals, out_dir, k=k):
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
    idempotency_key: Annotated[str | None, typer.Option(
        help="makes the master create the batch once: a submission sent again with the same "
             "key (its retries do) gets the batch the first one created (default: a new "
             "key)")] = None,
) -> None:
    """Submit tasks as a batch of episodes (once, however often the request is retried)."""
    import uuid

    from coda.contracts.master_api import BatchCreate

    tasks = _task_files(path)
    spec = BatchCreate(name=name or path.name, tasks=[t.model_dump(mode="json") for t in tasks],
                       rollouts=rollouts, priority=priority)
    key = idempotency_key or uuid.uuid4().hex
    try:
        created = _call_master(url, admin_token(token, home),
                               lambda m: m.create_batch(spec, key=key))
    except typer.Exit:
        console.print(f"to submit it again without risking a second batch: coda submit "
                      f"{path} --idempotency-key {key} (with the same options)")
        raise
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
    report = _call_master(url, admin_token(token, home), lambda m: m.status())
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
    w = Table(title="Workers")
    for col in ("worker", "state", "busy/slots", "desktops"):
        w.add_column(col)
    for worker in report.workers:
        state = worker.provider
        desktops = ("-" if state is None else "ok" if state.ok else "probing"
                    if state.fault is None else f"waiting: {state.fault.value}: {state.detail}")
        w.add_row(worker.name, "online" if worker.online else "gone",
                  f"{worker.busy_slots}/{worker.slots}", desktops)
    out.print(w)


admin_app = typer.Typer(help="Fleet administration at a running master (admin token).",
                        no_args_is_help=True)


@admin_app.command("worker-tokens")
def worker_tokens(
    url: Annotated[str, typer.Option(help="master URL (CODA_MASTER_URL)")] = DEFAULT_URL,
    token: Annotated[str | None, typer.Option(help="admin token (CODA_ADMIN_TOKEN)")] = None,
    home: Annotated[Path, typer.Option(help="data dir of a local `coda up`")] = DEFAULT_HOME,
) -> None:
    """The master's worker tokens by fingerprint (never the token), when each was revoked and
    the workers registered with it."""
    rows = _call_master(url, admin_token(token, home), lambda m: m.worker_tokens())
    t = Table(title="Worker tokens")
    for col in ("fingerprint", "revoked at", "workers"):
        t.add_column(col)
    for row in rows:
        t.add_row(row.fingerprint, row.revoked_at.isoformat() if row.revoked_at else "-",
                  ", ".join(str(w)[:8] for w in row.workers) or "-")
    Console().print(t)


@admin_app.command("revoke-worker-token")
def revoke_worker_token(
    fingerprint: Annotated[str | None, typer.Argument(
        help="the token's fingerprint (`coda admin worker-tokens`)")] = None,
    token_file: Annotated[Path | None, typer.Option(
        help="a file holding the worker token to revoke (its fingerprint is computed here; "
        "the token is never sent)")] = None,
    url: Annotated[str, typer.Option(help="master URL (CODA_MASTER_URL)")] = DEFAULT_URL,
    token: Annotated[str | None, typer.Option(help="admin token (CODA_ADMIN_TOKEN)")] = None,
    home: Annotated[Path, typer.Option(help="data dir of a local `coda up`")] = DEFAULT_HOME,
) -> None:
    """Revoke a worker token at a running master (no restart): its server's next requests
    are refused (401) and the jobs its workers hold go back to the queue."""
    import hashlib

    if (fingerprint is None) == (token_file is None):
        console.print("[red]give the fingerprint or --token-file (one of them)[/]")
        raise typer.Exit(2)
    if token_file is not None:
        secret = token_file.read_text().strip()
        fingerprint = hashlib.sha256(secret.encode()).hexdigest()[:16]
    assert fingerprint is not None
    done = _call_master(url, admin_token(token, home),
                        lambda m: m.revoke_worker_token(fingerprint))
    typer.echo(done.model_dump_json())


_register_service_clis()
app.add_typer(admin_app, name="admin")

app.add_typer(_vllm_app, name="vllm", help="vLLM's own server for a model role.")
app.add_typer(_vcsim_app, name="vcsim",
              help="VMware's vSphere simulator with desktop VMs (development).")

if __name__ == "__main__":  # pragma: no cover
    app()
