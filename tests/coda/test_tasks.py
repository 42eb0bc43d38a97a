"""TaskSpec loads every ScienceBoard task and OSWorld task JSON without losing fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coda.tasks import TaskFormat, TaskLoadError, TaskSpec, load_tasks, parse_task

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "scienceboard"
BUNDLED = Path(__file__).resolve().parents[2] / "examples" / "scienceboard"
SCIENCEBOARD = SHARED if SHARED.exists() else BUNDLED
FILES = sorted(SCIENCEBOARD.rglob("*.json"))

OSWORLD = {
    "id": "bb5e4c0d-f964-439c-97b6-bdb9747de3f4",
    "snapshot": "chrome",
    "instruction": "Can you make Bing the main search engine when I look stuff up on the internet?",
    "source": "https://support.google.com/chrome/answer/95426",
    "config": [{"type": "launch", "parameters": {"command": ["google-chrome",
                                                             "--remote-debugging-port=1337"]}},
               {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork",
                                                             "tcp:localhost:1337"]}}],
    "trajectory": "trajectories/",
    "related_apps": ["chrome"],
    "evaluator": {"func": "match_in_list", "result": {"type": "default_search_engine"},
                  "expected": {"type": "rule", "rules": {"expected": ["Microsoft Bing", "Bing"]}}},
}


def test_all_scienceboard_files_are_found():
    assert len(FILES) >= 100
    apps = {f.parent.name for f in FILES}
    assert {"KAlgebra", "ChimeraX", "Lean", "TeXstudio"} <= apps


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_scienceboard_task_loads_without_losing_fields(path: Path):
    doc = json.loads(path.read_text())
    task = load_tasks(path)[0]
    assert task.source.format is TaskFormat.SCIENCEBOARD
    assert task.id == f"{path.parent.name}/{path.stem}"
    assert task.app == doc["type"] and task.instruction == doc["instruction"]
    assert task.step_budget == doc["steps"]
    assert [s.model_dump(exclude_unset=True) for s in task.setup] == doc["initialize"]
    assert [e.model_dump(exclude_unset=True) for e in task.evaluators] == doc["evaluate"]
    assert task.reference_answer == (str(doc["ans"]) if "ans" in doc else None)
    assert task.snapshot == doc.get("snapshot")
    # round trip: through JSON and back to the native document, nothing lost
    again = TaskSpec.model_validate_json(task.model_dump_json())
    assert again.to_native() == doc
    assert parse_task(again.to_native(), path=str(path)) == task


def test_osworld_task_maps_and_round_trips():
    task = parse_task(OSWORLD)
    assert task.source.format is TaskFormat.OSWORLD
    assert task.id == OSWORLD["id"] and task.app == "chrome"
    assert [s.func for s in task.setup] == ["launch", "launch"]
    assert task.setup[0].model_extra == {
        "command": ["google-chrome", "--remote-debugging-port=1337"]}
    assert task.evaluators[0].type == "osworld"
    assert task.evaluators[0].model_extra["func"] == "match_in_list"  # type: ignore[index]
    assert task.to_native() == OSWORLD


def test_coda_native_task():
    task = parse_task({"id": "t1", "app": "KAlgebra", "instruction": "plot sin(x)"})
    assert task.source.format is TaskFormat.CODA and task.step_budget == 15


@pytest.mark.parametrize(("doc", "field"), [
    ({"type": "KAlgebra", "sort": "VM", "steps": 5}, "instruction"),
    ({"type": "KAlgebra", "sort": "VM", "steps": 0, "instruction": "x"}, "step_budget"),
    ({"id": "x", "instruction": "   ", "app": "a"}, "instruction"),
    ({"config": [], "instruction": "x"}, "id"),
])
def test_bad_task_names_the_field(doc, field):
    with pytest.raises(TaskLoadError, match=field):
        parse_task(doc, path="bad.json")


def test_load_tasks_jsonl_and_errors(tmp_path: Path):
    f = tmp_path / "tasks.jsonl"
    f.write_text(json.dumps({"id": "a", "app": "X", "instruction": "do a"}) + "\n\n"
                 + json.dumps({"id": "b", "app": "X", "instruction": "do b"}) + "\n")
    assert [t.id for t in load_tasks(f)] == ["a", "b"]
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    with pytest.raises(TaskLoadError, match=r"bad.jsonl:1"):
        load_tasks(tmp_path / "bad.jsonl")
    with pytest.raises(TaskLoadError, match="no such file"):
        load_tasks(tmp_path / "missing.json")
