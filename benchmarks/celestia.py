"""Celestia on a local slot and in a desktop container (real Xvfb, window manager, guest
agent, the project's build of ScienceBoard's fork; the container: image coda-desktop holding the
host's build, ``scripts/docker-build.sh desktop``): what a Celestia task costs.

* ``launch_ready_s``: a Celestia task's setup (A-04), from a freshly reset slot to ready (dump
  server up, main window maximised, the start script's travel done), median of ``--runs``;
* ``reset_s``: the slot's reset with Celestia open (close the applications, restore the home);
* ``screenshot_ms``: the agent's screenshot over HTTP with Celestia up, median of ``--shots``;
* ``dump_ms``: the dump with three entities through the agent's ``/coda/celestia``;
* ``idle_cpu_cores``: the Celestia process's CPU time per second of wall time, 5 s after the
  last input, over ``--idle-s`` seconds, with the idle frame cap (``capped``) and without it
  (``uncapped``: ``CODA_CELESTIA_IDLE_FPS=0``); local slot only;
* ``container``: launch_ready_s, reset_s, screenshot_ms, dump_ms in a desktop container;
* ``episodes``: episodes per minute through ``coda worker`` with 1, 2 and 4 Celestia slots
  (``--slots``), local and container: ``--per-slot`` replayed episodes of A-02 per slot
  (``benchmarks.episodes``: a real master, the planner and executor services on the replay
  backend of ``examples/replays/celestia-A-02.*``), with the machine's load averages around
  each run (the machine is shared: they say how much else ran).

    python -m benchmarks.celestia --out benchmarks/results/celestia.json
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import episodes as replayed
from benchmarks.common import configure_bench_logging, loadavg, machine, median, write_result
from coda.logging import get_logger
from coda.tasks import SetupStep, TaskSpec, load_task_file
from worker.providers.base import Desktop
from worker.providers.docker import DockerProvider, DockerSettings
from worker.providers.image import celestia as build
from worker.providers.local import LocalProvider
from worker.tasks import TaskContext, run_setup
from worker.tasks.adapters.celestia import app

log = get_logger("benchmarks.celestia")

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


def launch(desktop: Desktop, task: TaskSpec) -> tuple[TaskContext, float]:
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    t0 = time.monotonic()
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    return ctx, time.monotonic() - t0


def slot_figures(desktop: Desktop, task: TaskSpec, args: argparse.Namespace,
                 ) -> tuple[TaskContext, dict[str, Any]]:
    """Launch to ready and reset (``--runs``), screenshot and dump (``--shots``) on
    ``desktop``; the last task's context (Celestia still up) and the figures."""
    launches, resets, shots, dumps = [], [], [], []
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
    return ctx, {"launch_ready_s": median(launches),
                 "launch_ready_s_all": [round(x, 2) for x in launches],
                 "reset_s": median(resets), "screenshot_ms": median(shots),
                 "dump_ms": median(dumps)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    task = load_task_file(TASK / "A-04.json")
    with LocalProvider() as provider:
        desktop = provider.desktop(0)
        ctx, figures = slot_figures(desktop, task, args)
        capped = idle_cores(ctx, args.idle_s)
        ctx, _ = launch(desktop, with_env(task, "CODA_CELESTIA_IDLE_FPS=0"))
        uncapped = idle_cores(ctx, args.idle_s)
        desktop.reset()
    return {
        "what": "Celestia (ScienceBoard's fork, scripts/celestia.sh) on a local slot; "
                "container: in a desktop container (image coda-desktop)",
        "build": str(build.prefix()),
        **figures,
        "idle_cpu_cores": {"capped": round(capped, 3), "uncapped": round(uncapped, 3)},
    }


def container_figures(args: argparse.Namespace) -> dict[str, Any]:
    """The slot figures in a desktop container (image coda-desktop of this checkout)."""
    task = load_task_file(TASK / "A-04.json")
    settings = DockerSettings(name_prefix=f"coda-bench-celestia-{os.getpid()}")
    with DockerProvider(settings) as provider:
        _, figures = slot_figures(provider.desktop(0), task, args)
        image = settings.client().images.get(settings.image_name)
    return {"image": {"name": settings.image_name, "id": image.id[:19]}, **figures}


def episode_rates(args: argparse.Namespace) -> dict[str, Any]:
    """Episodes per minute with each ``--slots`` count, local and container: ``--per-slot``
    replayed A-02 episodes per slot, the load averages before and after each run."""
    out: dict[str, Any] = {"task": "Celestia/A-02", "models": "replay backend",
                           "episodes_per_slot": args.per_slot}
    for provider in args.providers:
        for slots in args.slots:
            before = loadavg()
            options = ({"name_prefix": f"coda-bench-celestia-{os.getpid()}-{slots}",
                        "ready_timeout_s": 180} if provider == "docker" else None)
            figures = replayed.measure(slots * args.per_slot, slots, provider=provider,
                                       provider_options=options, task=TASK / "A-02.json",
                                       replays="celestia-A-02")
            out.setdefault(provider, {})[str(slots)] = {
                k: figures[k] for k in ("episodes_per_min", "episodes", "episodes_succeeded",
                                        "wall_s", "step_overhead_ms")
            } | {"loadavg_before": before, "loadavg_after": loadavg()}
            log.info("bench.celestia_episodes", provider=provider, slots=slots,
                     episodes_per_min=figures["episodes_per_min"])
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shots", type=int, default=10)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--slots", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--per-slot", type=int, default=2,
                        help="replayed episodes per slot in the episodes-per-minute runs")
    parser.add_argument("--providers", nargs="*", default=["local", "docker"],
                        choices=["local", "docker"],
                        help="where the slot figures beyond local and the episode runs go "
                             "(docker: the image coda-desktop, scripts/docker-build.sh desktop)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/celestia.json"))
    args = parser.parse_args(argv)
    configure_bench_logging()
    if not build.is_built():
        raise SystemExit(f"Celestia is not built: {build.BUILD_HINT}")
    before = loadavg()
    result = run(args)
    if "docker" in args.providers:
        result["container"] = container_figures(args)
    if args.slots:
        result["episodes"] = episode_rates(args)
    result["machine"] = machine(before)
    result["at"] = datetime.now(UTC).isoformat(timespec="seconds")
    write_result(args.out, result)


if __name__ == "__main__":
    main()
