"""Prompt, reply parsing and TaskSpec output of task generation."""

from __future__ import annotations

import json

import pytest

from coda.tasks import TaskFormat, TaskSpec, parse_task
from coda_app.taskgen.generate import build_generation_messages, make_task, parse_instructions

SEED = {
    "type": "KAlgebra", "sort": "2d", "steps": 12, "instruction": "Plot y = x^2 in the 2D graph.",
    "initialize": [{"func": "launch", "cmd": ["kalgebra"], "wait": 2}],
    "evaluate": [{"type": "eqn", "key": "x^2"}],
}


@pytest.mark.parametrize(("reply", "expected"), [
    ('["Plot sin(x).", "Compute 2+2."]', ["Plot sin(x).", "Compute 2+2."]),
    ('Here you go:\n```json\n[\n  "Plot sin(x).",\n  "Compute 2+2."\n]\n```',
     ["Plot sin(x).", "Compute 2+2."]),
    ('[{"instruction": "Plot sin(x)."}, {"instruction": ""}]', ["Plot sin(x)."]),
    ("1. Plot sin(x).\n2) Compute 2+2.\n\n- \"Open the help.\"\n* Close it",
     ["Plot sin(x).", "Compute 2+2.", "Open the help.", "Close it"]),
    ("Plot [0, 1] range\nZoom in", ["Plot [0, 1] range", "Zoom in"]),
    ("", []),
])
def test_parse_instructions(reply: str, expected: list[str]) -> None:
    assert parse_instructions(reply) == expected


def test_generation_prompt_carries_seeds_rules_and_screenshot() -> None:
    msgs = build_generation_messages(app="KAlgebra", seeds=["Plot x^2.", "Compute 3!"], n=5,
                                     description="A calculator and plotter.",
                                     screenshot_url="data:image/png;base64,AAAA")
    text = msgs[0]["content"][0]["text"]
    assert "- Plot x^2.\n- Compute 3!" in text
    assert "Write 5 NEW tasks" in text and "judgeable" in text and "initial state" in text
    assert msgs[0]["content"][-1]["image_url"]["url"].startswith("data:image/png")
    no_shot = build_generation_messages(app="KAlgebra", seeds=["a"], n=1)
    assert len(no_shot[0]["content"]) == 1


def test_make_task_reuses_the_seed() -> None:
    seed = parse_task(SEED, path="VM/KAlgebra/1.json")
    task = make_task(seed, "Plot y = sin(x) in the 2D graph.")
    assert task.app == "KAlgebra" and task.step_budget == 12
    assert task.setup == seed.setup and task.evaluators == []
    assert task.source.format is TaskFormat.CODA and task.source.path == seed.id
    assert task.id.startswith("gen/KAlgebra/") and task.id != seed.id
    assert make_task(seed, "other").id != task.id
    again = TaskSpec.model_validate(json.loads(json.dumps(task.model_dump(mode="json"))))
    assert again == task
