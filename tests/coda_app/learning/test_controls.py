"""``coda learn --control`` and the learning benchmark take the controls of issue 37 (point 4):
``derangement`` (old name ``shuffle``, still accepted), ``uniform`` and ``zero``; the run
records the control's own name, and a result written with the old name still reads. No loop
runs here: the closed loop is replaced by a stand-in that returns an empty result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.learning import CONTROLS, summary
from coda_app.learning.result import ExecutorCheck, LearnResult, Measured
from trainer.config import RewardControl

from .standin import invoke_learn


def result(control: str) -> LearnResult:
    check = ExecutorCheck(backend="replay", files={}, files_at_end={}, ready_at_start={},
                          ready_at_end={})
    curve = [Measured(planner_version=v, rollouts=8, succeeded=k, rate=k / 8, ci_low=0.0,
                      ci_high=1.0, round=i, update=i, batch_id="b", by_task={}, episodes_s=1.0)
             for i, (v, k) in enumerate([("base", 3), ("r-000001", 2)])]
    return LearnResult(run="r", reward_control=control, target=0.9, tasks=[], settings={},
                       warm_start={}, executor=check, curve=curve)


@pytest.mark.parametrize(("given", "control"), [
    ("derangement", RewardControl.DERANGEMENT), ("shuffle", RewardControl.DERANGEMENT),
    ("uniform", RewardControl.UNIFORM), ("zero", RewardControl.ZERO),
    ("none", RewardControl.NONE)])
def test_the_command_takes_every_control(given: str, control: RewardControl,
                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran = invoke_learn(["--control", given, "--home", str(tmp_path)], monkeypatch,
                       lambda s: result(s.reward_control.value))
    assert ran.code == 0, ran.output
    assert [s.reward_control for s in ran.seen] == [control]
    assert f"control: {control.value}" in ran.output


def test_an_unknown_control_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    ran = invoke_learn(["--control", "permute"], monkeypatch,
                       lambda s: result(s.reward_control.value))
    assert ran.code == 2 and "invalid settings" in ran.output


@pytest.mark.parametrize("control", ["shuffle", "derangement", "uniform", "zero"])
def test_results_and_the_benchmark_summary_read_every_control(control: str) -> None:
    """A result recorded as 'shuffle' (before the rename) still reads, and the summary says
    what each control can show."""
    old = LearnResult.model_validate_json(result(control).model_dump_json())
    figures: dict[str, Any] = summary(result("none"), [old])["controls"][0]
    assert figures["reward_control"] == control
    assert figures["meaning"] == CONTROLS[RewardControl(control)]
    assert figures["rise"] == pytest.approx(-1 / 8)
