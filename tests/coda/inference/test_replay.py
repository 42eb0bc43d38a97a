"""The replay backend: recorded outputs chosen by turn and text, repeated to n, typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coda.inference.base import BackendError, GenerateOptions
from coda.inference.factory import make_backend
from coda.inference.replay import (
    ReplayBackend,
    ReplayFileError,
    ReplayScript,
    choose,
    load_script,
    past_turns,
)
from coda.inference.spec import BackendSpec

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ReplayScript.model_validate({"entries": [
    {"turn": 0, "contains": "plot", "outputs": ["first", "other"]},
    {"turn": 1, "outputs": ["second"]},
    {"contains": "anything", "outputs": ["any turn"]},
]})


def conversation(turns: int, text: str = "plot sin", prefill: bool = False) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": text}]
    for i in range(turns):
        msgs += [{"role": "user", "content": [{"type": "text", "text": "next?"},
                                              {"type": "image_url", "image_url": {"url": "x"}}]},
                 {"role": "assistant", "content": f"step {i}"}]
    msgs.append({"role": "user", "content": "next?"})
    if prefill:
        msgs.append({"role": "assistant", "content": "Thought: ...\nAction: "})
    return msgs


@pytest.mark.parametrize(("turns", "prefill", "want"), [
    (0, False, 0), (2, False, 2), (0, True, 0), (3, True, 3)])
def test_past_turns_leave_out_a_continued_message(turns: int, prefill: bool, want: int) -> None:
    assert past_turns(conversation(turns, prefill=prefill), continuing=prefill) == want


@pytest.mark.parametrize(("turns", "text", "want"), [
    (0, "plot sin", ["first", "other"]),
    (1, "plot sin", ["second"]),
    (5, "anything goes", ["any turn"]),
    (0, "nothing known", None),
    (5, "plot sin", None),
])
def test_choose_takes_the_first_matching_entry(turns: int, text: str, want: list[str] | None,
                                               ) -> None:
    assert choose(SCRIPT, conversation(turns, text), continuing=False) == want


def test_final_contains_keys_an_output_by_the_last_message_alone() -> None:
    """An executor output keyed by the plan it continues: the same text earlier in the
    history (a past step's thought) does not match."""
    script = ReplayScript.model_validate({"entries": [
        {"final_contains": "p:=log(3)", "outputs": ["type(content='p:=log(3)')"]},
    ], "default": "hotkey(key='shift')"})
    msgs = conversation(1)
    msgs[2]["content"] = "Thought: I type p:=log(3)\nAction: type"  # the past turn
    msgs.append({"role": "assistant", "content": "Thought: The task is complete.\nAction: "})
    assert choose(script, msgs, continuing=True) == ["hotkey(key='shift')"]
    msgs[-1]["content"] = "Thought: I type p:=log(3) and press Enter.\nAction: "
    assert choose(script, msgs, continuing=True) == ["type(content='p:=log(3)')"]


@pytest.mark.parametrize(("text", "want"), [
    ("step 1 a step 2 b end", True), ("step 1 b step 2 a end", False),
    ("step 1 a step 2 b", False), ("", False)])
def test_contains_all_matches_texts_in_order(text: str, want: bool) -> None:
    script = ReplayScript.model_validate({"entries": [
        {"contains_all": ["step 1", " a", "step 2", " b", "end"], "outputs": ["yes"]}]})
    assert (choose(script, [{"role": "user", "content": text}], continuing=False) is not None
            ) is want


async def test_backend_repeats_outputs_to_n_and_fails_typed(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(SCRIPT.model_dump_json())
    backend = ReplayBackend(path)
    got = await backend.chat(conversation(0), GenerateOptions(n=5))
    assert [c.text for c in got] == ["first", "other", "first", "other", "first"]
    with pytest.raises(BackendError, match="no recorded output for turn 0"):
        await backend.chat(conversation(0, "unknown"), GenerateOptions())
    assert (await backend.ready())["entries"] == 3


def test_bad_replay_files_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ReplayFileError, match="does not exist"):
        ReplayBackend(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"entries": [{"outputs": []}]}))
    with pytest.raises(ReplayFileError, match=r"bad\.json"):
        ReplayBackend(bad)


def test_the_factory_builds_it_and_the_bundled_scripts_load() -> None:
    for name in ("texstudio-C-02.planner.json", "texstudio-C-02.executor.json"):
        spec = BackendSpec(backend="replay", model=str(ROOT / "examples" / "replays" / name))
        backend = make_backend(spec)
        assert isinstance(backend, ReplayBackend) and backend.script.entries


def test_a_script_includes_other_files_after_its_own_entries(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(
        {"entries": [{"contains": "alpha", "outputs": ["A"]}]}))
    (tmp_path / "top.json").write_text(json.dumps(
        {"entries": [{"contains": "top", "outputs": ["T"]}], "include": ["a.json"],
         "default": "D"}))
    script = load_script(tmp_path / "top.json")
    assert [e.outputs for e in script.entries] == [["T"], ["A"]] and script.default == "D"
    (tmp_path / "loop.json").write_text(json.dumps({"include": ["loop.json"]}))
    with pytest.raises(ReplayFileError, match="includes itself"):
        load_script(tmp_path / "loop.json")


def test_the_demo_scripts_answer_both_recorded_tasks() -> None:
    demo = Path(__file__).resolve().parents[3] / "examples" / "replays"
    for role in ("planner", "executor", "judge"):
        names = {e.contains for e in load_script(demo / f"demo.{role}.json").entries}
        assert "λC system" in names or any("x: M. B" in (n or "") for n in names), role
        assert any("log" in (n or "") for n in names), role
