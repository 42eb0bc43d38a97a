"""Celestia on a local slot (real Xvfb, window manager, guest agent, the project's build of
ScienceBoard's fork): what a Celestia task costs.

* ``launch_ready_s``: a Celestia task's setup (A-04), from a freshly reset slot to ready (dump
  server up, main window maximised, the start script's travel done), median of ``--runs``;
* ``reset_s``: the slot's reset with Celestia open (close the applications, restore the home);
* ``screenshot_ms``: the agent's screenshot over HTTP with Celestia up, median of ``--shots``;
* ``dump_ms``: the dump with three entities through the agent's ``/coda/celestia``;
* ``idle_cpu_cores``: the Celestia process's CPU time per second of wall time, 5 s after the
  last input, over ``--idle-s`` seconds, with the idle frame cap (``capped``) and without it
  (``uncapped``: ``CODA_CELESTIA_IDLE_FPS=0``).

    python -m benchmarks.celestia --out benchmarks/results/celestia.json
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.common import configure_bench_logging, machine, median, write_result
from coda.tasks import SetupStep, TaskSpec, load_task_file
from worker.providers.image import celestia as build
from worker.providers.local import LocalDesktop, LocalProvider
from worker.tasks import TaskContext, run_setup
from worker.tasks.adapters.celestia import app

TASK = Path(__file__).resolve().parents[1] / "examples" / "scienceboard" / "VM" / "Celestia"
QUERY = [{"name": "Sol", "type": 1}, {"name": "Earth", "type": 2},
         {"name": "Andromeda Galaxy", "type": 3}]


def with_env(task: TaskSpec, assignment: str) -> TaskSpec:
    """``task`` whose launch command starts with ``assignment`` (``NAME=value``)."""
    steps = []
    for step in task.setup:
        extra = dict(step.model_extra or {})
        if step.func == "launch" and isinstance(extra.get("command"), str):
            extra["command"] = f"{assignment} {extra['command']}"
        steps.append(SetupStep.model_validate({**extra, "func": step.func, "wait": step.wait}))
    return task.model_copy(update={"setup": steps})


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cores(ctx: TaskContext, seconds: float) -> float:
    window = app.main_window(ctx)
    assert window is not None and window.pid is not None, "no Celestia window with a pid"
    time.sleep(5.0)  # the cap engages 3 s after the last input
    before, t0 = cpu_seconds(window.pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(window.pid) - before) / (time.monotonic() - t0)


def launch(desktop: LocalDesktop, task: TaskSpec) -> tuple[TaskContext, float]:
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    t0 = time.monotonic()
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    return ctx, time.monotonic() - t0


def run(args: argparse.Namespace) -> dict[str, Any]:
    task = load_task_file(TASK / "A-04.json")
    launches, resets, shots, dumps = [], [], [], []
    with LocalProvider() as provider:
        desktop = provider.desktop(0)
        assert isinstance(desktop, LocalDesktop)
        desktop.reset()
        ctx = None
        for _ in range(args.runs):
            t0 = time.monotonic()
            desktop.reset()
            resets.append(time.monotonic() - t0)
            ctx, seconds = launch(desktop, task)
            launches.append(seconds)
        assert ctx is not None and desktop.guest is not None
        for _ in range(args.shots):
            t0 = time.monotonic()
            desktop.guest.screenshot()
            shots.append((time.monotonic() - t0) * 1000)
            t0 = time.monotonic()
            app.dump(ctx, QUERY)
            dumps.append((time.monotonic() - t0) * 1000)
        capped = idle_cores(ctx, args.idle_s)
        ctx, _ = launch(desktop, with_env(task, "CODA_CELESTIA_IDLE_FPS=0"))
        uncapped = idle_cores(ctx, args.idle_s)
        desktop.reset()
    return {
        "what": "Celestia (ScienceBoard's fork, scripts/celestia.sh) on a local slot",
        "build": str(build.prefix()),
        "launch_ready_s": median(launches), "launch_ready_s_all": [round(x, 2) for x in launches],
        "reset_s": median(resets), "screenshot_ms": median(shots), "dump_ms": median(dumps),
        "idle_cpu_cores": {"capped": round(capped, 3), "uncapped": round(uncapped, 3)},
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shots", type=int, default=10)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/celestia.json"))
    args = parser.parse_args(argv)
    configure_bench_logging()
    if not build.is_built():
        raise SystemExit(f"Celestia is not built: {build.BUILD_HINT}")
    write_result(args.out, run(args))


if __name__ == "__main__":
    main()
