"""Does the loop make a planner better? The closed-loop run (``coda learn``) and its controls.

1. **run**: the warm-started tiny planner, GRPO on the rewards, until a version reaches the
   target success rate (default 90 %) or ``--updates`` updates;
2. **controls** (``--controls``, default ``uniform,zero``): each the very same warm start
   (cached) and loop under a control, for as many updates as the run took (``--control-updates``
   at least). ``uniform`` permutes each group's rewards uniformly (a plan may keep its own): a
   null whose expected advantage is zero, though every update still moves the policy. ``zero``
   takes no optimizer step at all: every version is the warm start, so its curve is the
   measurement's noise alone. ``derangement`` (old name ``shuffle``) gives every plan another
   plan's reward: an ANTI-learning control, which pushes the policy the wrong way and is expected
   to fall;
3. **transfer** (``--transfer``, default KAlgebra's C-04, the harmonic sum stored in ``p``,
   which no curriculum and no warm-up row holds): the run's last version on fresh episodes of a
   task it never trained on; reported with its interval, no target.

``--models general`` (the default) runs the general models, so that no recording is anywhere in
the loop: the OCR executor and the rule-based judge (``coda learn --executor ocr --judge
rules``); ``--models replay`` the curricula's recorded executor outputs and judge verdicts (the
results before issue 37 point 6; no transfer with them).

All are real runs of :class:`coda_app.learning.run.ClosedLoop` (master, worker, desktops with
KAlgebra, judge, group jobs, trainer, versions pulled by the planner service); the curves by
planner version, the mean group reward and importance weight per update, the plans the run
found, the transfer and the timings go to ``benchmarks/results/learning.json`` (written after
each run, so that a stopped benchmark keeps what it measured), which ``docs/figures.md`` draws.

    python -m benchmarks.learning --out benchmarks/results/learning.json
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import configure_bench_logging, loadavg, machine, write_result
from coda.logging import get_logger
from coda.significance import fisher_greater
from coda_app.learning.curriculum import load_curricula
from coda_app.learning.recordings import warm_texts
from coda_app.learning.result import REWARDED, LearnResult, Measured
from coda_app.learning.run import ClosedLoop
from coda_app.learning.settings import OCR_EXECUTOR, RULES_JUDGE, LearnSettings
from trainer.config import RewardControl

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "learning.json"
DEFAULT_TRANSFER = ROOT / "examples" / "scienceboard" / "VM" / "KAlgebra" / "C-04.json"
"""KAlgebra's harmonic sum (``p := sum(1/n: n=1..20)``): typed into the console like the
curricula's tasks, in none of them."""
log = get_logger("benchmarks.learning")
CONTROLS = {
    RewardControl.DERANGEMENT: "anti-learning: each plan trains on another plan's reward "
                               "(expected advantage -1/(G-1) of its own); expected to fall",
    RewardControl.UNIFORM: "null: rewards permuted uniformly within each group (expected "
                           "advantage zero); the policy still moves",
    RewardControl.ZERO: "no optimizer step: every version is the warm start; the measurement's "
                        "noise alone",
}
"""What each control can show (the summary carries it with the control's figures)."""
MODELS: dict[str, dict[str, Any]] = {
    "general": {"executor": OCR_EXECUTOR, "judge": RULES_JUDGE},
    "replay": {"executor": None, "judge": None},
}
"""``--models``: the executor and judge settings of every run (general: no recording)."""
TARGET_UPDATES = 20
TARGET_MINUTES = 60.0
"""Issue 37 point 6: the target within this many updates, the run in under this many minutes."""
EXAMPLES = 10
"""Novel rewarded plans the summary quotes (the result holds them all)."""


def _ci(m: Measured) -> list[float | None]:
    return [m.ci_low, m.ci_high]


def versions(run: LearnResult) -> list[dict[str, Any]]:
    """Per version measured: its success with the interval, and the figures of the update that
    trained on the groups it sampled (mean group reward, mean importance weight) (pure)."""
    trained = {u.policy_version: u for u in run.updates}
    out = []
    for m in run.curve:
        u = trained.get(m.planner_version)
        out.append({"version": m.planner_version, "update": m.update, "rollouts": m.rollouts,
                    "succeeded": m.succeeded, "rate": m.rate, "ci": _ci(m),
                    "mean_group_reward": u.metrics.get("reward_mean") if u else None,
                    "is_weight_mean": u.metrics.get("is_weight_mean") if u else None})
    return out


def p_above(measured: Sequence[Measured], warm: Measured) -> float | None:
    """One-sided Fisher p that the pooled episodes of ``measured`` succeed more often than the
    warm start's (pure; None without episodes)."""
    x = sum(m.succeeded for m in measured)
    n = sum(m.rollouts for m in measured)
    if n == 0 or warm.rollouts == 0:
        return None
    return float(f"{fisher_greater(x, n, warm.succeeded, warm.rollouts):.4g}")


def control_figures(control: LearnResult, warm: Measured | None,
                    texts: set[str]) -> dict[str, Any]:
    """A control's curve against the run's warm start: whether any version rose above its 95 %
    interval, and how far the control fell (pure)."""
    rates = [m.rate for m in control.curve if m.rate is not None]
    high = warm.ci_high if warm else None
    above = [m.planner_version for m in control.curve
             if high is not None and m.rate is not None and m.rate > high]
    warm_rate = warm.rate if warm else None
    return {
        "reward_control": control.reward_control,
        "meaning": CONTROLS.get(RewardControl(control.reward_control), ""),
        "updates": len(control.updates),
        "first_rate": rates[0] if rates else None, "last_rate": rates[-1] if rates else None,
        "max_rate": max(rates) if rates else None, "min_rate": min(rates) if rates else None,
        "rise": round(control.rise(), 4),
        "first_ci": _ci(control.curve[0]) if control.curve else None,
        "rose_above_warm_start_interval": bool(above), "versions_above_it": above,
        "fall_from_warm_start": round(warm_rate - rates[-1], 4)
        if rates and warm_rate is not None else None,
        "largest_fall_from_warm_start": round(warm_rate - min(rates), 4)
        if rates and warm_rate is not None else None,
        "novel_rewarded_plans": len(control.novel_rewarded_plans(texts)),
        "versions": versions(control),
        "minutes": round(control.seconds / 60, 1),
        "recording_free": control.recording_free,
        "executor_unchanged": control.executor_unchanged}


def summary(run: LearnResult, controls: Sequence[LearnResult] = (),
            texts: set[str] | None = None) -> dict[str, Any]:
    """The figures the page quotes (pure). ``texts``: the plan texts of the warm-up data
    (:func:`coda_app.learning.recordings.warm_texts`); a rewarded plan outside them is novel."""
    texts = texts if texts is not None else set()
    first = run.curve[0] if run.curve else None
    last = run.curve[-1] if run.curve else None
    later = run.curve[1:]
    novel = run.novel_rewarded_plans(texts)
    out: dict[str, Any] = {
        "recording_free": run.recording_free,
        "executor_backend": run.executor.backend, "judge_backend": run.judge_backend,
        "tasks": run.tasks,
        "episodes_per_version_min": min((m.rollouts for m in run.curve), default=0),
        "warm_start_rate": first.rate if first else None,
        "warm_start_ci": _ci(first) if first else None,
        "final_rate": last.rate if last else None,
        "final_ci": _ci(last) if last else None,
        "final_p_vs_warm_start": p_above(later[-1:], first) if first else None,
        "last_two_p_vs_warm_start": p_above(later[-2:], first) if first else None,
        "versions": versions(run),
        "updates": len(run.updates),
        "reached_target": run.reached is not None,
        "reached_after_updates": run.reached.update if run.reached else None,
        "run_minutes": round(run.seconds / 60, 1),
        "learn_minutes": round(run.phases_s.get("learn", 0.0) / 60, 1),
        "version_mismatches": sum(len(m.version_mismatches) for m in run.curve),
        "groups_off_version": sum(n for u in run.updates for v, n in u.group_versions.items()
                                  if v != u.policy_version),
        "executor_unchanged": run.executor_unchanged,
        "rewarded_plans": len(run.rewarded_plans),
        "rewarded_at_least": REWARDED,
        "warm_start_texts": len(texts),
        "novel_rewarded_plans": len(novel),
        "novel_rewarded_plan_examples": novel[:EXAMPLES],
        "transfer": None if run.transfer is None else {
            "task": str(run.settings.get("transfer")), "version": run.transfer.planner_version,
            "rollouts": run.transfer.rollouts, "succeeded": run.transfer.succeeded,
            "rate": run.transfer.rate, "ci": _ci(run.transfer)},
        "controls": [control_figures(c, first, texts) for c in controls],
    }
    out["target_met"] = {
        "recording_free": run.recording_free,
        "reached_within_updates": run.reached is not None
        and run.reached.update <= TARGET_UPDATES,
        "under_an_hour": run.seconds / 60 < TARGET_MINUTES,
        "no_null_above_warm_start": not any(
            c["rose_above_warm_start_interval"] for c in out["controls"]
            if c["reward_control"] in (RewardControl.UNIFORM, RewardControl.ZERO)),
    }
    return out


def control_list(text: str) -> list[RewardControl]:
    """``--controls``: comma-separated control names (``none``: no control); each once, in
    order (argparse type)."""
    out: list[RewardControl] = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        try:
            control = RewardControl(name)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name!r}: not a control ({', '.join(c.value for c in RewardControl)})"
            ) from None
        if control is not RewardControl.NONE and control not in out:
            out.append(control)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--models", choices=sorted(MODELS), default="general",
                   help="general: the OCR executor and the rules judge, no recording "
                        "(default); replay: the curricula's recordings")
    p.add_argument("--updates", type=int, default=TARGET_UPDATES)
    p.add_argument("--rollouts", type=int, default=8, help="per task, per version measured")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--controls", type=control_list, default=[RewardControl.UNIFORM,
                                                             RewardControl.ZERO],
                   help="the control runs, comma-separated: uniform, zero, derangement (old "
                        "name shuffle); 'none': no control (default: uniform,zero)")
    p.add_argument("--control", dest="controls", type=control_list,
                   help="one control run (the old form of --controls)")
    p.add_argument("--control-updates", type=int, default=8,
                   help="each control's updates at least (else as many as the run took)")
    p.add_argument("--transfer", default=None,
                   help="task file the last version is also measured on ('none': no transfer; "
                        "default with --models general: KAlgebra's C-04)")
    p.add_argument("--transfer-rollouts", type=int, default=None,
                   help="its rollouts (default: --rollouts times the curricula's tasks, as "
                        "many episodes as a version gets)")
    p.add_argument("--provider", default="local")
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--home", type=Path, default=ROOT / ".coda" / "learning-bench")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return p


def options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed arguments, the transfer task resolved (a Path or None)."""
    p = parser()
    args = p.parse_args(argv)
    if args.transfer is None:
        args.transfer = DEFAULT_TRANSFER if args.models == "general" else None
    elif args.transfer == "none":
        args.transfer = None
    else:
        args.transfer = Path(args.transfer)
    if args.transfer is not None and args.models != "general":
        p.error("--transfer needs --models general (a recording answers only the curricula)")
    return args


def settings(args: argparse.Namespace, **extra: Any) -> LearnSettings:
    return LearnSettings(home=args.home, updates=args.updates, rollouts=args.rollouts,
                         target=args.target, provider=args.provider, slots=args.slots,
                         **MODELS[args.models], **extra)


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """The run, then each control on the same warm start; the document written after each."""
    started, before = time.monotonic(), loadavg()
    curricula = load_curricula(settings(args).tasks)
    texts = warm_texts(curricula)
    transfer_rollouts = args.transfer_rollouts or args.rollouts * len(curricula)
    run = asyncio.run(ClosedLoop(settings(
        args, run_name=f"bench-run-{int(time.time())}", transfer=args.transfer,
        transfer_rollouts=transfer_rollouts)).run())
    controls: list[LearnResult] = []

    def document() -> dict[str, Any]:
        return {"created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "seconds": round(time.monotonic() - started, 1), "models": args.models,
                "summary": summary(run, controls, texts), "run": run.model_dump(mode="json"),
                "controls": [c.model_dump(mode="json") for c in controls],
                "machine": machine(before)}

    write_result(args.out, document())
    for control in args.controls:
        controls.append(asyncio.run(ClosedLoop(settings(
            args, run_name=f"bench-{control.value}-{int(time.time())}",
            reward_control=control, stop_at_target=False,
        ).model_copy(update={"updates": max(args.control_updates, len(run.updates))})).run()))
        write_result(args.out, document())
    return document()


def main(argv: Sequence[str] | None = None) -> None:
    args = options(argv)
    configure_bench_logging()
    doc = run_all(args)
    log.info("learning.written", out=str(args.out),
             **{k: v for k, v in doc["summary"].items() if not isinstance(v, dict | list)})


if __name__ == "__main__":
    main()
