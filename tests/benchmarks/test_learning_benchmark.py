"""``benchmarks/learning.py`` produces what issue 37 point 6 asks for: the run and its controls
on the same warm start with the general models, the figures per version, the controls against
the warm start's interval, the Fisher p, the novel rewarded plans and the transfer. No loop
runs: the summary is pure, and the flow runs a stand-in for the closed loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import learning
from benchmarks.learning import DEFAULT_TRANSFER, options, run_all, summary, versions
from coda.significance import fisher_greater
from coda_app.learning.curriculum import load_curricula
from coda_app.learning.recordings import warm_texts
from coda_app.learning.result import ExecutorCheck, LearnResult, Measured, Update
from coda_app.learning.settings import CURRICULA, LearnSettings
from trainer.config import RewardControl

N = 24


def measured(version: str, k: int, i: int, n: int = N) -> Measured:
    return Measured(planner_version=version, rollouts=n, succeeded=k, rate=k / n,
                    ci_low=round(max(0.0, k / n - 0.2), 4),
                    ci_high=round(min(1.0, k / n + 0.2), 4),
                    round=i, update=i, batch_id="b", by_task={}, episodes_s=1.0)


def update(i: int, trained_on: str, reward: float, weight: float | None) -> Update:
    metrics = {"reward_mean": reward, **({"is_weight_mean": weight} if weight else {})}
    return Update(update=i, policy_version=trained_on, published=f"v{i}", groups=4,
                  group_versions={trained_on: 4}, dropped={}, metrics=metrics, seconds=1.0)


def result(control: str, successes: list[int], backend: str = "ocr", **extra: Any
           ) -> LearnResult:
    names = ["base", *(f"v{i}" for i in range(1, len(successes)))][:len(successes)]
    check = ExecutorCheck(backend=backend, files={}, files_at_end={}, ready_at_start={},
                          ready_at_end={})
    return LearnResult(
        run="r", reward_control=control, target=0.9, tasks=["a", "b", "c"],
        settings=extra.pop("settings", {}), warm_start={}, executor=check,
        judge_backend="rules" if backend == "ocr" else "replay",
        curve=[measured(v, k, i) for i, (v, k) in enumerate(zip(names, successes, strict=True))],
        updates=[update(i + 1, v, 0.1 * (i + 1), 1.0 - 0.01 * i)
                 for i, v in enumerate(names[:-1])], seconds=600.0, **extra)


def test_the_summary_has_every_figure_of_point_6() -> None:
    texts = warm_texts(load_curricula(CURRICULA))
    known = sorted(texts)[0]
    run = result("none", [3, 12, 22], rewarded_plans=sorted([known, "new one", "new two"]),
                 transfer=measured("v2", 5, 3), settings={"transfer": "C-04.json"})
    run.reached = run.curve[-1]
    uniform = result("uniform", [3, 10, 2])   # 10/24 = 0.417 > the warm start's 0.125 + 0.2
    zero = result("zero", [4, 2, 3], rewarded_plans=["new one"])
    out = summary(run, [uniform, zero], texts)

    assert out["recording_free"] and out["episodes_per_version_min"] == N
    assert [v["version"] for v in out["versions"]] == ["base", "v1", "v2"]
    assert out["versions"][0] == {"version": "base", "update": 0, "rollouts": N, "succeeded": 3,
                                  "rate": 3 / N, "ci": [0.0, 0.325],
                                  "mean_group_reward": 0.1, "is_weight_mean": 1.0}
    assert out["versions"][1]["is_weight_mean"] == pytest.approx(0.99)
    assert out["versions"][2]["mean_group_reward"] is None  # no update trained on the last
    assert out["final_p_vs_warm_start"] == pytest.approx(fisher_greater(22, N, 3, N), rel=1e-3)
    assert out["last_two_p_vs_warm_start"] == pytest.approx(
        fisher_greater(34, 2 * N, 3, N), rel=1e-3)
    assert out["novel_rewarded_plans"] == 2 and out["rewarded_plans"] == 3
    assert out["novel_rewarded_plan_examples"] == ["new one", "new two"]
    assert out["warm_start_texts"] == len(texts)
    assert out["transfer"] == {"task": "C-04.json", "version": "v2", "rollouts": N,
                               "succeeded": 5, "rate": 5 / N, "ci": [0.0083, 0.4083]}

    u, z = out["controls"]
    assert u["reward_control"] == "uniform" and u["rose_above_warm_start_interval"]
    assert u["versions_above_it"] == ["v1"]
    assert u["fall_from_warm_start"] == pytest.approx(1 / N, abs=1e-4)
    assert u["largest_fall_from_warm_start"] == pytest.approx(1 / N, abs=1e-4)
    assert not z["rose_above_warm_start_interval"] and z["versions_above_it"] == []
    assert z["fall_from_warm_start"] == 0.0 and z["novel_rewarded_plans"] == 1
    assert z["largest_fall_from_warm_start"] == pytest.approx(1 / N, abs=1e-4)
    assert z["meaning"] == learning.CONTROLS[RewardControl.ZERO]
    assert out["target_met"] == {"recording_free": True, "reached_within_updates": True,
                                 "under_an_hour": True, "no_null_above_warm_start": False}
    json.dumps(out)  # the document holds it as JSON


def test_an_old_result_without_the_new_fields_still_summarises() -> None:
    old = result("none", [5], backend="replay").model_dump(mode="json")
    for key in ("rewarded_plans", "transfer"):
        old.pop(key)
    out = summary(LearnResult.model_validate(old))
    assert out["recording_free"] is False and out["transfer"] is None
    assert out["final_p_vs_warm_start"] is None and out["last_two_p_vs_warm_start"] is None
    assert out["novel_rewarded_plans"] == 0 and out["controls"] == []
    assert out["target_met"]["reached_within_updates"] is False
    assert versions(LearnResult.model_validate(old))[0]["mean_group_reward"] is None
    assert summary(result("none", []))["warm_start_rate"] is None


def test_the_defaults_are_point_6s_runs() -> None:
    args = options([])
    assert args.models == "general"
    assert args.controls == [RewardControl.UNIFORM, RewardControl.ZERO]
    assert args.transfer == DEFAULT_TRANSFER and DEFAULT_TRANSFER.exists()
    assert args.updates == 20 and args.rollouts == 8


@pytest.mark.parametrize(("argv", "controls"), [
    (["--controls", "none"], []),
    (["--controls", "zero"], [RewardControl.ZERO]),
    (["--controls", "uniform, zero,uniform"], [RewardControl.UNIFORM, RewardControl.ZERO]),
    (["--control", "shuffle"], [RewardControl.DERANGEMENT]),
    (["--control", "none"], []),
])
def test_the_controls_are_a_list(argv: list[str], controls: list[RewardControl]) -> None:
    assert options(argv).controls == controls


@pytest.mark.parametrize("argv", [
    ["--controls", "uniform,permute"], ["--models", "paper"],
    ["--models", "replay", "--transfer", str(DEFAULT_TRANSFER)]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        options(argv)
    assert exc.value.code == 2


def test_the_transfer_task_is_chosen_or_left_out(tmp_path: Path) -> None:
    assert options(["--models", "replay"]).transfer is None
    assert options(["--transfer", "none"]).transfer is None
    assert options(["--transfer", str(tmp_path / "t.json")]).transfer == tmp_path / "t.json"


def test_each_control_runs_from_the_same_warm_start_as_long_as_the_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[LearnSettings] = []

    class StandIn:
        def __init__(self, s: LearnSettings) -> None:
            seen.append(s)
            self.s = s

        async def run(self) -> LearnResult:
            if self.s.reward_control is RewardControl.NONE:
                return result("none", [3, 8, 15, 22, 23, 23, 23, 23, 23, 23, 23])  # 10 updates
            return result(self.s.reward_control.value, [3, 4])

    monkeypatch.setattr(learning, "ClosedLoop", StandIn)
    out = tmp_path / "learning.json"
    doc = run_all(options(["--home", str(tmp_path), "--out", str(out)]))
    run, *controls = seen
    assert run.transfer == DEFAULT_TRANSFER and run.transfer_rollouts == 8 * 3
    assert run.executor is not None and run.executor.backend == "ocr"
    assert run.judge is not None and run.judge.backend == "rules"
    assert [c.reward_control for c in controls] == [RewardControl.UNIFORM, RewardControl.ZERO]
    for c in controls:
        assert c.home == run.home and c.updates == 10 and not c.stop_at_target
        assert c.transfer is None and c.executor == run.executor and c.judge == run.judge
    written = json.loads(out.read_text())
    assert written["models"] == "general" and len(written["controls"]) == 2
    assert [c["reward_control"] for c in written["summary"]["controls"]] == ["uniform", "zero"]
    assert doc["summary"]["updates"] == 10


def test_the_figures_page_draws_the_new_document(tmp_path: Path) -> None:
    """A point 6 document: every control's rows and curve, the Fisher p, the novel plans, the
    transfer and the importance weights (an old document keeps its page: tests/test_docs.py)."""
    from benchmarks.figures_doc import render_learning

    run = result("none", [3, 12, 22], rewarded_plans=["new one"],
                 transfer=measured("v2", 5, 3), settings={"transfer": "x/C-04.json"})
    controls = [result("uniform", [3, 10, 2]), result("zero", [4, 2, 3])]
    (tmp_path / "learning.json").write_text(json.dumps({
        "created_at": "2026-12-08T00:00:00+00:00", "models": "general",
        "summary": summary(run, controls, set()), "run": run.model_dump(mode="json"),
        "controls": [c.model_dump(mode="json") for c in controls]}))
    page = "\n".join(render_learning(tmp_path))
    assert "`uniform`, each group's rewards permuted uniformly" in page
    assert "| no recording in the loop (executor / judge) | yes (ocr / rules) |" in page
    assert "| tasks, episodes per version (least) | 3, 24 |" in page
    p = f"{fisher_greater(22, N, 3, N):.2g} ({fisher_greater(34, 2 * N, 3, N):.2g})"
    assert f"one-sided Fisher p (last two pooled) | {p} |" in page
    assert "never in the warm-start data (of all rewarded) | 1 (of 1) |" in page
    assert "(no target) | C-04.json: 21 % (1 %-41 %), 24 episodes |" in page
    assert "| control `uniform`: a version above the warm start's 95 % interval | yes |" in page
    assert "| control `zero`: fell from the warm start by (last / most) | 0 points / 4 points |" \
        in page
    assert page.count("```mermaid") == 3
    assert "| control zero: version |" in page and "| base | 0 | 24 | 12 % (0 %-32 %) | 0.100 " \
        "| 1.000 |" in page
