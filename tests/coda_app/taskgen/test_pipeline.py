"""Task generation against real models: the tiny Qwen2.5-VL in process and behind
`transformers serve` (OpenAI-compatible), with the judge service screening instructions."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coda.clients.judge import InstructionCheckRequest, JudgeClient
from coda.inference.base import GenerateOptions
from coda.inference.transformers_local import TransformersBackend
from coda.tasks import TaskSpec, load_tasks, parse_task
from coda_app.taskgen.cli import app
from coda_app.taskgen.generate import generate_tasks
from judge_service.app import create_app
from judge_service.settings import JudgeSettings
from tests.fixtures.services import TOKENS, asgi_client

SEEDS = [
    {"type": "KAlgebra", "sort": "2d", "steps": 12, "instruction": "Plot y = x^2 in the 2D graph.",
     "initialize": [{"func": "launch", "cmd": ["kalgebra"], "wait": 2}],
     "evaluate": [{"type": "eqn", "key": "x^2"}]},
    {"type": "KAlgebra", "sort": "calc", "steps": 8, "instruction": "Compute 12 * 34.",
     "initialize": [{"func": "launch", "cmd": ["kalgebra"]}], "evaluate": []},
]


@pytest.fixture
async def judge_client(tiny_backend: TransformersBackend) -> AsyncIterator[JudgeClient]:
    judge_app = create_app(JudgeSettings(max_tokens=8, **TOKENS.env()),
                           backends={"tiny": tiny_backend})
    async with asgi_client(judge_app) as http:
        yield JudgeClient("http://service", client=http, retries=1)


async def test_generate_with_judge_screening(tiny_backend: TransformersBackend,
                                             judge_client: JudgeClient) -> None:
    seeds = [parse_task(doc, path=f"VM/KAlgebra/{i}.json") for i, doc in enumerate(SEEDS)]
    checked: list[str] = []

    async def check(text: str) -> bool:
        checked.append(text)
        verdict = await judge_client.check_instruction(
            InstructionCheckRequest(instruction=text, app="KAlgebra"))
        return verdict.ok

    report = await generate_tasks(
        tiny_backend, app="KAlgebra", seeds=seeds, n=3, check=check, max_rounds=2,
        options=GenerateOptions(n=1, temperature=1.0, top_p=1.0, max_tokens=40, seed=3))
    assert report.rounds == 2 and report.proposed >= 1
    # the random judge never answers in the schema, so every proposal is rejected
    assert report.tasks == [] and report.rejected == len(checked) == (
        report.proposed - report.duplicates)


async def test_generate_without_judge_emits_taskspecs(tiny_backend: TransformersBackend) -> None:
    seeds = [parse_task(doc, path=f"VM/KAlgebra/{i}.json") for i, doc in enumerate(SEEDS)]
    report = await generate_tasks(
        tiny_backend, app="KAlgebra", seeds=seeds, n=2, max_rounds=2,
        options=GenerateOptions(n=1, temperature=1.0, top_p=1.0, max_tokens=40, seed=3))
    assert 1 <= len(report.tasks) <= 2
    for i, task in enumerate(report.tasks):
        seed = seeds[i % len(seeds)]
        assert task.app == "KAlgebra" and task.setup == seed.setup
        assert task.step_budget == seed.step_budget and task.source.path == seed.id
    texts = [t.instruction for t in report.tasks]
    assert len(set(texts)) == len(texts)


def test_cli_against_transformers_serve(transformers_serve_url: str, tiny_model_dir: Path,
                                        tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text("\n".join(json.dumps(d) for d in SEEDS) + "\n")
    out = tmp_path / "generated.jsonl"
    args = ["generate", "--app", "kalgebra", "--seeds", str(seeds), "--n", "2", "--out", str(out),
            "--llm-url", f"{transformers_serve_url}/v1", "--llm-model", str(tiny_model_dir),
            "--max-tokens", "24", "--rounds", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "new tasks written" in " ".join(result.output.split())
    tasks = load_tasks(out) if out.exists() else []
    assert len(tasks) <= 2
    assert all(isinstance(t, TaskSpec) and t.app == "KAlgebra" for t in tasks)


def test_cli_refuses_seedless_app(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(json.dumps(SEEDS[0]) + "\n")
    result = CliRunner().invoke(app, ["generate", "--app", "Celestia", "--seeds", str(seeds),
                                      "--n", "1", "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2
    assert "no task for app 'Celestia'" in " ".join(result.output.split())
