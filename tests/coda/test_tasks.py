"""TaskSpec loads every ScienceBoard task and OSWorld task JSON without losing fields."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from coda.tasks import (
    TaskDocument,
    TaskFormat,
    TaskLoadError,
    TaskSpec,
    load_tasks,
    parse_task,
)

SCIENCEBOARD = Path(__file__).resolve().parents[2] / "examples" / "scienceboard"
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
    ({"type": "KAlgebra", "sort": "VM", "steps": 0, "instruction": "x"}, "steps"),
    ({"id": "x", "instruction": "   ", "app": "a"}, "instruction"),
    ({"config": [], "instruction": "x"}, "id"),
])
def test_bad_task_names_the_field(doc, field):
    with pytest.raises(TaskLoadError, match=field):
        parse_task(doc, path="bad.json")


SB_DOC = json.loads((SCIENCEBOARD / "VM" / "KAlgebra" / "A-01.json").read_text())
SB_BAD = [  # every field of a ScienceBoard document, with values of the wrong type or size
    ("steps", "abc"), ("steps", None), ("steps", [1]), ("steps", 1.5), ("steps", 2**31),
    ("steps", {"n": 1}), ("type", 5), ("type", None), ("type", ""), ("type", "x" * 101),
    ("type", ["KAlgebra"]), ("sort", 5), ("instruction", 5), ("instruction", None),
    ("instruction", ""), ("instruction", ["a"]), ("version", 1.0), ("snapshot", 5),
    ("snapshot", {"a": 1}), ("initialize", 5), ("initialize", None), ("initialize", "abc"),
    ("initialize", [5]), ("initialize", [{}]), ("initialize", [{"func": 5}]),
    ("initialize", [{"func": "launch", "wait": "soon"}]), ("initialize", [{"func": "x",
                                                                           "wait": -1}]),
    ("evaluate", 5), ("evaluate", None), ("evaluate", [5]), ("evaluate", [{"type": None}]),
    ("evaluate", {"type": "stop"}), ("ans", {"x": 1}), ("ans", [1, 2]), ("penalty", 5),
    ("id", 5), ("id", ""), ("id", "x" * 201),
]


@pytest.mark.parametrize(("field", "value"), SB_BAD, ids=lambda v: repr(v)[:20])
def test_scienceboard_wrong_types_name_the_field(field: str, value: object) -> None:
    with pytest.raises(TaskLoadError, match=rf"field '{field}(\.|')"):
        parse_task({**SB_DOC, field: value}, path="KAlgebra/A-01.json")


OSWORLD_BAD = [  # every field of an OSWorld document, with values of the wrong type or size
    ("id", 5), ("id", None), ("id", ""), ("id", "x" * 201), ("instruction", 5),
    ("instruction", None), ("snapshot", 5), ("config", 5), ("config", None), ("config", [5]),
    ("config", ["launch"]), ("config", [{"parameters": {}}]), ("config", [{"type": 5}]),
    ("config", [{"type": "launch", "parameters": 5}]),
    ("config", [{"type": "launch", "parameters": [1]}]),
    ("config", [{"type": "sleep", "parameters": {"wait": "x"}}]), ("evaluator", 5),
    ("evaluator", [1]), ("evaluator", "exact_match"), ("related_apps", 5),
    ("related_apps", "chrome"), ("related_apps", [5]), ("related_apps", [None]),
    ("related_apps", ["x" * 101]), ("related_apps", [""]),
]


@pytest.mark.parametrize(("field", "value"), OSWORLD_BAD, ids=lambda v: repr(v)[:20])
def test_osworld_wrong_types_name_the_field(field: str, value: object) -> None:
    with pytest.raises(TaskLoadError, match=rf"field '{field}(\.|')"):
        parse_task({**OSWORLD, field: value})


CODA_DOC = {"id": "t1", "app": "KAlgebra", "instruction": "plot sin(x)"}
CODA_BAD = [
    ("id", 5), ("id", "x" * 201), ("app", None), ("app", "x" * 101), ("instruction", 3),
    ("step_budget", "many"), ("step_budget", 1001), ("step_budget", 2**63), ("setup", 5),
    ("setup", [5]), ("evaluators", [{}]), ("reference_answer", []), ("related_apps", 5),
    ("source", 5), ("source", {"format": "excel"}), ("source", {"raw": 5}), ("bogus", 1),
]


@pytest.mark.parametrize(("field", "value"), CODA_BAD, ids=lambda v: repr(v)[:20])
def test_coda_wrong_types_name_the_field(field: str, value: object) -> None:
    with pytest.raises(TaskLoadError, match=rf"field '{field}(\.|')"):
        parse_task({**CODA_DOC, field: value})


@pytest.mark.parametrize("doc", [5, "task", None, [SB_DOC], True])
def test_a_task_is_an_object(doc: object) -> None:
    with pytest.raises(TaskLoadError, match="a task must be a JSON object"):
        parse_task(doc)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from([SB_DOC, OSWORLD, CODA_DOC]),
       changes=st.dictionaries(st.sampled_from(sorted({*SB_DOC, *OSWORLD, *CODA_DOC,
                                                       "initialize", "config", "evaluator",
                                                       "sort", "type", "parameters"})),
                               JSON, max_size=3))
def test_any_field_values_give_a_spec_or_a_task_load_error(base: dict[str, object],
                                                          changes: dict[str, object]) -> None:
    """What a fuzzer would do: any JSON value in any known field never escapes as another
    exception."""
    with contextlib.suppress(TaskLoadError):
        parse_task({**base, **changes})


def test_task_document_schema_is_the_union_of_the_formats() -> None:
    schema = TypeAdapter(list[TaskDocument]).json_schema()
    names = {ref["$ref"].rsplit("/", 1)[1] for ref in schema["items"]["anyOf"]}
    assert names == {"TaskSpec", "ScienceBoardTask", "OSWorldTask"}
    defs = schema["$defs"]
    assert "sort" in defs["ScienceBoardTask"]["required"]
    assert "config" in defs["OSWorldTask"]["required"]
    assert TypeAdapter(list[TaskDocument]).validate_python([SB_DOC]) == [SB_DOC]


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
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TaskLoadError, match=r"deep\.json: not valid JSON"):
        load_tasks(tmp_path / "deep.json")
    (tmp_path / "huge.json").write_text('{"steps": ' + "9" * 5000 + "}")
    with pytest.raises(TaskLoadError, match=r"huge\.json: not valid JSON"):
        load_tasks(tmp_path / "huge.json")
    (tmp_path / "latin1.json").write_bytes(b'{"instruction": "caf\xe9"}')
    with pytest.raises(TaskLoadError, match="not UTF-8"):
        load_tasks(tmp_path / "latin1.json")
