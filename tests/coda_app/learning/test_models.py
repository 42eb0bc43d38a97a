"""``coda learn``'s executor and judge: the recordings (the default), or the general models
that need none: the OCR executor and the rule-based judge (``--executor ocr --judge rules``).
No loop runs here: the closed loop is replaced by a stand-in that returns an empty result."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from coda_app.learning.result import ExecutorCheck, LearnResult
from coda_app.learning.settings import OCR_EXECUTOR, RULES_JUDGE, LearnSettings

from .standin import Invoked, invoke_learn


def test_the_settings_take_the_general_models() -> None:
    s = LearnSettings(executor=OCR_EXECUTOR, judge=RULES_JUDGE)
    assert s.executor is not None and (s.executor.backend, s.executor.model) == ("ocr",
                                                                                  "rapidocr")
    assert s.judge is not None and s.judge.backend == "rules" and s.judge.is_rules
    assert s.judge.name == "judge"
    assert s.recorded_models == []
    assert LearnSettings().recorded_models == ["executor", "judge"]
    assert LearnSettings(judge=RULES_JUDGE).recorded_models == ["executor"]


def test_the_environment_takes_them_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODA_LEARN_EXECUTOR", '{"backend": "ocr", "model": "rapidocr"}')
    monkeypatch.setenv("CODA_LEARN_JUDGE", '{"backend": "rules"}')
    s = LearnSettings()
    assert s.executor is not None and s.executor.backend == "ocr"
    assert s.judge is not None and s.judge.backend == "rules"


@pytest.mark.parametrize(("field", "value", "named"), [
    ("judge", {"backend": "oracle"}, "judge.backend"),
    ("judge", {"backend": "openai"}, "judge.model"),
    ("judge", {"backend": "ocr", "model": "rapidocr"}, "executor only"),
    ("executor", {"backend": "rules"}, "executor.backend"),
    ("executor", {"backend": "ocr"}, "executor.model"),
])
def test_a_bad_model_is_refused_naming_its_field(field: str, value: dict[str, str],
                                                  named: str) -> None:
    with pytest.raises(ValidationError) as err:
        LearnSettings.model_validate({field: value})
    assert named in str(err.value) and field in str(err.value)


def empty_result(s: LearnSettings) -> LearnResult:
    check = ExecutorCheck(backend=s.executor.backend if s.executor else "replay", files={},
                          files_at_end={}, ready_at_start={}, ready_at_end={})
    return LearnResult(run="r", reward_control="none", target=0.9, tasks=[], settings={},
                       warm_start={}, executor=check,
                       judge_backend=s.judge.backend if s.judge else "replay")


def invoke(args: list[str], monkeypatch: pytest.MonkeyPatch) -> Invoked:
    return invoke_learn(args, monkeypatch, empty_result)


def test_the_command_runs_the_general_models(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path) -> None:
    ran = invoke(["--executor", "ocr", "--judge", "rules", "--home", str(tmp_path)],
                          monkeypatch)
    assert ran.code == 0, ran.output
    [s] = ran.seen
    assert s.executor is not None and s.executor.backend == "ocr"
    assert s.judge is not None and s.judge.backend == "rules"
    assert "executor ocr, judge rules" in " ".join(ran.output.split())


def test_replay_is_the_default_and_overrides_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran = invoke(["--home", str(tmp_path)], monkeypatch)
    assert ran.code == 0, ran.output
    assert ran.seen[0].recorded_models == ["executor", "judge"]
    assert "executor replay, judge replay" in " ".join(ran.output.split())
    monkeypatch.setenv("CODA_LEARN_EXECUTOR", '{"backend": "ocr", "model": "rapidocr"}')
    monkeypatch.setenv("CODA_LEARN_JUDGE", '{"backend": "rules"}')
    ran = invoke(["--home", str(tmp_path), "--judge", "replay"], monkeypatch)
    assert ran.code == 0, ran.output
    assert ran.seen[0].recorded_models == ["judge"]


@pytest.mark.parametrize("args", [["--executor", "uitars"], ["--judge", "ocr"]])
def test_an_unknown_choice_is_refused(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    ran = invoke(args, monkeypatch)
    assert ran.code == 2 and args[0] in ran.output, ran.output


def test_a_result_without_the_judge_backend_reads_as_replayed() -> None:
    s = LearnSettings()
    old = empty_result(s).model_dump(mode="json")
    del old["judge_backend"]
    read = LearnResult.model_validate(old)
    assert read.judge_backend == "replay" and not read.recording_free
    assert empty_result(LearnSettings(executor=OCR_EXECUTOR, judge=RULES_JUDGE)).recording_free


def test_the_ocr_executors_counters_are_no_change_of_the_executor() -> None:
    def ready(passes: int, model: str = "d2a7") -> dict[str, object]:
        return {"status": "ready", "detail": {"executor": {
            "backend": "ocr", "model_files": {"det.onnx": model}, "ocr_passes": passes,
            "cache_hits": passes // 2}}}

    def check(start: dict[str, object], end: dict[str, object]) -> ExecutorCheck:
        return ExecutorCheck(backend="ocr", files={}, files_at_end={}, ready_at_start=start,
                             ready_at_end=end)

    assert check(ready(0), ready(7)).unchanged
    assert not check(ready(0), ready(7, model="ffff")).unchanged
