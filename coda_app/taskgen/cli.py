"""``coda tasks generate``: new tasks for an app from seed tasks (auto exploration)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import typer
from pydantic import SecretStr
from rich.console import Console
from rich.progress import Progress

app = typer.Typer(help="Task files: generate new tasks from seeds.")
console = Console(stderr=True)


@app.callback()
def tasks() -> None:
    """Task files: generate new tasks from seeds."""


def _read_existing(out: Path) -> list[str]:
    if not out.is_file():
        return []
    from coda.tasks import load_tasks

    return [t.instruction for t in load_tasks(out)]


@app.command("generate")
def generate_cmd(
    app_name: str = typer.Option(..., "--app", help="application, e.g. KAlgebra"),
    seeds: Path = typer.Option(..., "--seeds", help="seed tasks: JSON/JSONL file or directory"),
    n: int = typer.Option(..., "--n", min=1, help="how many new tasks"),
    out: Path = typer.Option(..., "--out", help="JSONL file the tasks are appended to"),
    screenshot: Path | None = typer.Option(None, "--screenshot", help="initial-state PNG"),
    description: str | None = typer.Option(None, help="a sentence describing the app"),
    llm_url: str = typer.Option("http://127.0.0.1:8000/v1", "--llm-url", envvar="CODA_LLM_URL",
                                help="OpenAI-compatible server"),
    llm_model: str = typer.Option("Qwen/Qwen2.5-72B-Instruct", "--llm-model",
                                  envvar="CODA_LLM_MODEL", help="served model name"),
    judge_url: str | None = typer.Option(None, "--judge-url",
                                         help="judge service: keep only clear, executable, "
                                              "judgeable instructions"),
    judge_token: SecretStr | None = typer.Option(
        None, "--judge-token", envvar="CODA_JUDGE_TOKEN", parser=SecretStr, metavar="TOKEN",
        help="an inference token of the judge service"),
    threshold: float = typer.Option(0.85, help="word similarity from which a task is a duplicate"),
    max_tokens: int = typer.Option(2048, help="LLM reply budget"),
    rounds: int = typer.Option(3, help="LLM calls at most"),
) -> None:
    """Ask an LLM for N new instructions, deduplicate, screen them, append TaskSpec JSONL."""
    from coda.inference.base import GenerateOptions
    from coda.inference.images import encode_data_url
    from coda.tasks import TaskLoadError, TaskSpec, load_tasks
    from coda_app.taskgen.generate import generate_tasks

    try:
        seed_tasks = [t for t in load_tasks(seeds) if t.app.lower() == app_name.lower()]
        existing = _read_existing(out)
        shot_bytes = screenshot.read_bytes() if screenshot is not None else None
        shot_url = encode_data_url(shot_bytes) if shot_bytes is not None else None
    except (TaskLoadError, OSError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    if not seed_tasks:
        console.print(f"[red]error:[/red] --seeds: no task for app '{app_name}' in {seeds}")
        raise typer.Exit(2)

    async def run() -> None:
        from coda.clients.judge import InstructionCheckRequest, JudgeClient
        from coda.contracts.services_api import ImageRef
        from coda.inference.openai_compat import OpenAICompatBackend

        backend = OpenAICompatBackend(base_url=llm_url, model=llm_model)
        token = judge_token.get_secret_value() if judge_token is not None else None
        judge = JudgeClient(judge_url, token=token) if judge_url else None
        shot_ref = (ImageRef(b64=base64.b64encode(shot_bytes).decode("ascii"))
                    if shot_bytes is not None else None)

        async def check(text: str) -> bool:
            assert judge is not None
            verdict = await judge.check_instruction(InstructionCheckRequest(
                instruction=text, app=seed_tasks[0].app, screenshot=shot_ref))
            if not verdict.ok:
                console.print(f"[yellow]rejected[/yellow] {text!r}: {verdict.reason or 'unparsed'}")
            return verdict.ok

        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            with Progress(console=console) as progress, out.open("a", encoding="utf-8") as fh:
                bar = progress.add_task(f"generating {app_name} tasks", total=n)

                def write(task: TaskSpec) -> None:
                    fh.write(json.dumps(task.model_dump(mode="json")) + "\n")
                    fh.flush()
                    progress.advance(bar)

                report = await generate_tasks(
                    backend, app=seed_tasks[0].app, seeds=seed_tasks, n=n,
                    description=description, screenshot_url=shot_url, existing=existing,
                    check=check if judge else None, threshold=threshold, max_rounds=rounds,
                    options=GenerateOptions(n=1, temperature=1.0, top_p=0.95,
                                            max_tokens=max_tokens),
                    on_task=write)
        finally:
            await backend.aclose()
            if judge is not None:
                await judge.aclose()
        console.print(f"{len(report.tasks)} new tasks written to {out} "
                      f"({report.proposed} proposed, {report.duplicates} duplicates, "
                      f"{report.rejected} rejected by the judge, {report.rounds} LLM calls)")

    try:
        asyncio.run(run())
    except Exception as exc:  # the CLI reports, it does not dump a traceback
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
