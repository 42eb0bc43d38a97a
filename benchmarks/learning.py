"""Does the loop make a planner better? The closed-loop run (``coda learn``) and its control.

1. **run**: the warm-started tiny planner, GRPO on the rewards, until a version reaches the
   target success rate (default 90 %) or ``--updates`` updates;
2. **control**: the very same warm start (cached) and loop under a control, for as many updates
   as the run took (``--control-updates`` at least). ``derangement`` (the default; old name
   ``shuffle``) gives every plan another plan's reward: an ANTI-learning control, which pushes
   the policy the wrong way and is expected to fall. ``uniform`` permutes each group's rewards
   uniformly (a plan may keep its own): a null whose expected advantage is zero, though every
   update still moves the policy. ``zero`` takes no optimizer step at all: every version is the
   warm start, so its curve is the measurement's noise alone.

Both are real runs of :class:`coda_app.learning.run.ClosedLoop` (master, worker, desktops with
KAlgebra, judge, group jobs, trainer, versions pulled by the planner service); the curves by
planner version, the mean group reward per update and the timings go to
``benchmarks/results/learning.json``, which ``docs/figures.md`` draws.

    python -m benchmarks.learning --out benchmarks/results/learning.json
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common import configure_bench_logging, loadavg, machine, write_result
from coda.logging import get_logger
from coda_app.learning.result import LearnResult
from coda_app.learning.run import ClosedLoop
from coda_app.learning.settings import LearnSettings
from trainer.config import RewardControl

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "learning.json"
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


def summary(run: LearnResult, control: LearnResult | None) -> dict[str, Any]:
    """The figures the page quotes (pure)."""
    first = run.curve[0] if run.curve else None
    out: dict[str, Any] = {
        "warm_start_rate": first.rate if first else None,
        "warm_start_ci": [first.ci_low, first.ci_high] if first else None,
        "final_rate": run.curve[-1].rate if run.curve else None,
        "final_ci": [run.curve[-1].ci_low, run.curve[-1].ci_high] if run.curve else None,
        "updates": len(run.updates),
        "reached_target": run.reached is not None,
        "reached_after_updates": run.reached.update if run.reached else None,
        "run_minutes": round(run.seconds / 60, 1),
        "learn_minutes": round(run.phases_s.get("learn", 0.0) / 60, 1),
        "version_mismatches": sum(len(m.version_mismatches) for m in run.curve),
        "groups_off_version": sum(n for u in run.updates for v, n in u.group_versions.items()
                                  if v != u.policy_version),
        "executor_unchanged": run.executor_unchanged,
    }
    if control is not None:
        rates = [m.rate for m in control.curve if m.rate is not None]
        out["control"] = {
            "reward_control": control.reward_control,
            "meaning": CONTROLS.get(RewardControl(control.reward_control), ""),
            "updates": len(control.updates),
            "first_rate": rates[0] if rates else None, "last_rate": rates[-1] if rates else None,
            "max_rate": max(rates) if rates else None, "rise": round(control.rise(), 4),
            "first_ci": [control.curve[0].ci_low, control.curve[0].ci_high]
            if control.curve else None,
            "minutes": round(control.seconds / 60, 1),
            "executor_unchanged": control.executor_unchanged}
    return out


def settings(args: argparse.Namespace, **extra: Any) -> LearnSettings:
    return LearnSettings(home=args.home, updates=args.updates, rollouts=args.rollouts,
                         target=args.target, provider=args.provider, slots=args.slots,
                         **extra)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--rollouts", type=int, default=8, help="per task, per version measured")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--control", choices=[*(c.value for c in RewardControl), "shuffle"],
                   default=RewardControl.DERANGEMENT.value,
                   help="the control run: derangement (old name shuffle), uniform or zero "
                        "('none': no control)")
    p.add_argument("--control-updates", type=int, default=8,
                   help="the control's updates at least (else as many as the run took)")
    p.add_argument("--provider", default="local")
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--home", type=Path, default=ROOT / ".coda" / "learning-bench")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args()
    configure_bench_logging()
    before = loadavg()
    started = time.monotonic()
    run = asyncio.run(ClosedLoop(settings(args, run_name=f"bench-run-{int(time.time())}")).run())
    control = None
    if args.control != "none":
        control = asyncio.run(ClosedLoop(settings(
            args, run_name=f"bench-control-{int(time.time())}",
            reward_control=RewardControl(args.control), stop_at_target=False,
        ).model_copy(update={"updates": max(args.control_updates, len(run.updates))})).run())
    figures = summary(run, control)
    doc = {"created_at": datetime.now(UTC).isoformat(timespec="seconds"),
           "seconds": round(time.monotonic() - started, 1),
           "summary": figures, "run": run.model_dump(mode="json"),
           "control": control.model_dump(mode="json") if control else None,
           "machine": machine(before)}
    write_result(args.out, doc)
    log.info("learning.written", out=str(args.out),
             **{k: v for k, v in figures.items() if not isinstance(v, dict)})


if __name__ == "__main__":
    main()
