"""ChimeraX on local slots (real Xvfb, window manager, guest agent, this machine's build of
``scripts/chimerax.sh``): what one ChimeraX desktop slot costs, with 1, 2 and 4 slots at once
(``--slots``). Every phase runs in all the slots of a count concurrently (one thread each), so
the figures of 4 slots are those of 4 slots sharing the machine.

* ``launch_ready_s``: the task's ``launch`` step (``worker.tasks.adapters.chimerax.step_launch``:
  ChimeraX started, done when its REST remote control answers) from a freshly reset slot,
  median over the slots; ``setup_s``: the whole setup (launch, clear the log, open the entry,
  turn);
* ``screenshot_ms``: the agent's screenshot over HTTP with ChimeraX up, median of ``--shots``
  per slot; ``states_dump_ms``: ScienceBoard's ``states`` dump through the agent
  (``states_dump``: ChimeraX writes it, the agent reads it back), the same;
* ``idle``: the CPU time per second of wall time of each slot's processes, ``--settle-s`` after
  the last command, over ``--idle-s`` (sampled every second through /proc by psutil):
  ``chimerax_cores`` for ChimeraX's own processes (what the slot's agent started: the launcher,
  ChimeraX, its session bus) and ``slot_cores`` for the whole desktop (those, Xvfb, the window
  manager, the agent); their resident memory at the end. The goal from issue 38 is judged on
  the first (an idle Celestia's 0.15 cores was measured on Celestia's process alone);
* ``episodes``: ``--episodes`` episodes of the task per slot, back to back: reset (ChimeraX
  open), the task's setup, its right solution sent through the guest agent's ``/chimerax/run``
  (ChimeraX's command line over REST), the task's own checkers; ``episodes_per_min`` counts the
  episodes completed (a verdict reached) per minute of the phase's wall time, ``reset_s`` is
  the median of those resets.

The machine's load averages are written at the start and end of the run and around each slot
count (the machine is shared: they say how much else ran). Desktop containers are not measured:
the coda-desktop image does not carry ChimeraX (its licence forbids redistribution).

    python -m benchmarks.chimerax --out benchmarks/results/chimerax.json
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import psutil

from benchmarks.common import configure_bench_logging, loadavg, machine, median, write_result
from coda import procs
from coda.contracts.desktop import CheckVerdict, EpisodeEnd, StepStatus
from coda.logging import get_logger
from coda.tasks import TaskSpec, load_task_file
from worker.providers.image import chimerax as build
from worker.providers.local import LocalDesktop, LocalProvider
from worker.tasks import TaskContext, run_checkers, run_setup
from worker.tasks.adapters.chimerax import states_dump

log = get_logger("benchmarks.chimerax")

TASKS = Path(__file__).resolve().parents[1] / "examples" / "scienceboard" / "VM" / "ChimeraX"
SOLUTIONS: dict[str, tuple[str, ...]] = {
    "A-04": ("style sphere", "color bychain"),  # checkers: states (bounds) and info (colours)
    "A-07": ("set bgColor grey",),  # checker: states (the view's background)
}
"""The right solution of a task: ChimeraX commands, as a user types them in its command line."""
IDLE_GOAL_CORES = 0.15
IDLE_GOAL = "no more than an idle Celestia's 0.15 cores"
NO_CONTAINER = ("the coda-desktop image does not carry ChimeraX yet (its licence forbids "
                "redistribution: a build is always the machine's own)")

T = TypeVar("T")
Samples = Sequence[tuple[float, dict[int, float]]]
"""CPU samples of a set of processes: (monotonic seconds, {pid: CPU seconds so far})."""


def cpu_cores(samples: Samples) -> dict[str, float]:
    """CPU used per second of wall time over the samples: ``cores`` over the whole window and
    ``peak_cores`` over the busiest interval between two samples. A process's share is its
    last sample less its first (less 0 when it was born after the first sample, its whole
    time then being the window's); one that ended between samples keeps what was last seen."""
    if len(samples) < 2:
        return {"cores": 0.0, "peak_cores": 0.0, "seconds": 0.0}
    first_t, first = samples[0]
    seen = dict(first)
    peak = 0.0
    for (t0, a), (t1, b) in pairwise(samples):
        if t1 > t0:
            peak = max(peak, sum(b[p] - a.get(p, 0.0) for p in b) / (t1 - t0))
        seen.update(b)
    seconds = samples[-1][0] - first_t
    used = sum(last - first.get(p, 0.0) for p, last in seen.items())
    cores = used / seconds if seconds > 0 else 0.0
    return {"cores": round(cores, 3), "peak_cores": round(peak, 3), "seconds": round(seconds, 1)}


def goal(chimerax_cores: Iterable[float], slot_cores: Iterable[float],
         limit: float = IDLE_GOAL_CORES) -> dict[str, Any]:
    """Issue 38's goal for an idle ChimeraX: its worst slot against ``limit``; the whole
    desktop's worst slot beside it."""
    worst = max(chimerax_cores, default=0.0)
    worst_slot = max(slot_cores, default=0.0)
    return {"goal": IDLE_GOAL, "limit_cores": limit, "chimerax_cores_max": round(worst, 3),
            "met": worst <= limit, "slot_cores_max": round(worst_slot, 3),
            "slot_met": worst_slot <= limit,
            "judged_on": "ChimeraX's own processes, the worst slot of every slot count "
                         "(Celestia's 0.15 was its process alone); slot_*: the whole desktop"}


def per_minute(completed: int, wall_s: float) -> float:
    """Episodes per minute of wall time (0 for no time)."""
    return round(completed * 60.0 / wall_s, 2) if wall_s > 0 else 0.0


# the slot's processes ----------------------------------------------------------------------


def app_pids(desktop: LocalDesktop) -> set[int]:
    """What the slot's agent started (marked with the desktop's id): ChimeraX, its launcher,
    its session bus."""
    return set(procs.marked_pids(desktop.id))


def slot_pids(desktop: LocalDesktop) -> set[int]:
    """Every process of the slot: its apps, Xvfb, the window manager and the agent (their
    command line or environment names the slot's folder)."""
    needle = str(desktop.dir)
    found = app_pids(desktop)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(needle in a for a in proc.info["cmdline"] or ()) or \
                    any(needle in v for v in proc.environ().values()):
                found.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    """{pid: user + system CPU seconds} of the processes still there."""
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        out[pid] = t.user + t.system
    return out


def rss_mib(pids: Iterable[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return round(total / 2**20, 1)


def idle_figures(desktops: Sequence[LocalDesktop], args: argparse.Namespace,
                 ) -> list[dict[str, Any]]:
    """Each slot's idle CPU (ChimeraX's processes, the whole slot) over ``--idle-s``, all the
    slots sampled together every second, ``--settle-s`` after the last command. ChimeraX's
    processes are looked up at every sample (one it starts meanwhile counts from its birth);
    the slot's others (Xvfb, window manager, agent) once."""
    time.sleep(args.settle_s)
    infra = [slot_pids(d) - app_pids(d) for d in desktops]
    series: list[tuple[list[tuple[float, dict[int, float]]], ...]] = [([], []) for _ in desktops]
    apps: list[set[int]] = [set() for _ in desktops]
    end = time.monotonic() + args.idle_s
    while True:
        now = time.monotonic()
        for i, d in enumerate(desktops):
            apps[i] = app_pids(d)
            app_cpu = cpu_of(apps[i])
            series[i][0].append((now, app_cpu))
            series[i][1].append((now, app_cpu | cpu_of(infra[i])))
        if now >= end:
            break
        time.sleep(min(1.0, end - now))
    out = []
    for app, others, (app_s, slot_s) in zip(apps, infra, series, strict=True):
        assert app, "a slot without ChimeraX's processes"
        a, s = cpu_cores(app_s), cpu_cores(slot_s)
        out.append({"chimerax_cores": a["cores"], "chimerax_peak_cores": a["peak_cores"],
                    "slot_cores": s["cores"], "slot_peak_cores": s["peak_cores"],
                    "seconds": a["seconds"], "chimerax_processes": len(app),
                    "slot_processes": len(app | others), "chimerax_rss_mib": rss_mib(app),
                    "slot_rss_mib": rss_mib(app | others)})
    return out


# the phases ----------------------------------------------------------------------------------


def in_each(desktops: Sequence[LocalDesktop], work: Callable[[LocalDesktop], T]) -> list[T]:
    """``work`` on every slot at once, one thread each; the results in slot order."""
    with ThreadPoolExecutor(max_workers=len(desktops)) as pool:
        return list(pool.map(work, desktops))


def set_up(desktop: LocalDesktop, task: TaskSpec) -> tuple[TaskContext, float, float]:
    """The task's setup on ``desktop`` (reset already): its context, the launch step's seconds
    (to ChimeraX's REST port answering) and the whole setup's."""
    ctx = TaskContext.for_desktop(desktop, task)
    t0 = time.monotonic()
    report = run_setup(ctx)
    took = time.monotonic() - t0
    assert report.ok, report.first_problem
    launch = next(s for s in report.steps if s.func == "launch" and s.status is StepStatus.OK)
    return ctx, launch.elapsed_ms / 1000.0, took


def solve(ctx: TaskContext, commands: Sequence[str]) -> None:
    """The right solution: each command through the agent's ``/chimerax/run``."""
    for command in commands:
        reply = ctx.guest.chimerax(ctx.layout.portlike, command)
        assert reply.error is None, f"{command!r}: {reply.error}"


def probe_slot(desktop: LocalDesktop, task: TaskSpec, shots: int) -> dict[str, Any]:
    """Reset, set up (launch to ready), then ``shots`` screenshots and states dumps."""
    desktop.reset()
    ctx, launch_s, setup_s = set_up(desktop, task)
    assert desktop.guest is not None
    shot_ms, dump_ms = [], []
    for _ in range(shots):
        t0 = time.monotonic()
        desktop.guest.screenshot()
        shot_ms.append((time.monotonic() - t0) * 1000)
        ctx.scratch.pop("chimerax_states", None)  # a fresh dump each time
        t0 = time.monotonic()
        states_dump(ctx)
        dump_ms.append((time.monotonic() - t0) * 1000)
    return {"launch_s": launch_s, "setup_s": setup_s, "screenshot_ms": shot_ms,
            "dump_ms": dump_ms}


def episodes_in(desktop: LocalDesktop, task: TaskSpec, commands: Sequence[str], count: int,
                ) -> list[dict[str, Any]]:
    """``count`` episodes back to back: reset, setup, the right solution, the checkers."""
    out = []
    for _ in range(count):
        t0 = time.monotonic()
        desktop.reset()
        reset_s = time.monotonic() - t0
        ctx, launch_s, _ = set_up(desktop, task)
        solve(ctx, commands)
        outcome = run_checkers(ctx, EpisodeEnd(kind="DONE"))
        out.append({"reset_s": reset_s, "launch_s": launch_s,
                    "episode_s": time.monotonic() - t0, "verdict": outcome.verdict.value,
                    "succeeded": outcome.verdict is CheckVerdict.SUCCESS})
        log.info("bench.chimerax_episode", slot=desktop.slot, verdict=outcome.verdict.value,
                 seconds=round(time.monotonic() - t0, 1))
    return out


def measure_slots(n: int, task: TaskSpec, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure with ``n`` slots at once, each phase in all of them concurrently."""
    commands = SOLUTIONS[args.task]
    before = loadavg()
    with LocalProvider() as provider:
        desktops = [provider.desktop(i) for i in range(n)]
        t0 = time.monotonic()
        in_each(desktops, lambda d: d.reset())
        start_s = time.monotonic() - t0
        log.info("bench.chimerax_started", slots=n, seconds=round(start_s, 1))
        probes = in_each(desktops, lambda d: probe_slot(d, task, args.shots))
        log.info("bench.chimerax_ready", slots=n,
                 launch_s=[round(p["launch_s"], 1) for p in probes])
        idle = idle_figures(desktops, args)
        log.info("bench.chimerax_idle", slots=n,
                 chimerax_cores=[i["chimerax_cores"] for i in idle],
                 slot_cores=[i["slot_cores"] for i in idle])
        t0 = time.monotonic()
        runs = in_each(desktops, lambda d: episodes_in(d, task, commands, args.episodes))
        wall_s = time.monotonic() - t0
        in_each(desktops, lambda d: d.reset())
    episodes = [e for run in runs for e in run]
    completed = sum(e["verdict"] != CheckVerdict.UNDECIDED.value for e in episodes)
    figures: dict[str, Any] = {
        "slots": n,
        "start_s": round(start_s, 2),
        "launch_ready_s": median([p["launch_s"] for p in probes]),
        "launch_ready_s_all": [round(p["launch_s"], 2) for p in probes]
        + [round(e["launch_s"], 2) for e in episodes],
        "setup_s": median([p["setup_s"] for p in probes]),
        "reset_s": median([e["reset_s"] for e in episodes]),
        "reset_s_all": [round(e["reset_s"], 2) for e in episodes],
        "screenshot_ms": median([x for p in probes for x in p["screenshot_ms"]]),
        "states_dump_ms": median([x for p in probes for x in p["dump_ms"]]),
        "idle": {"chimerax_cores": median([i["chimerax_cores"] for i in idle], 3),
                 "slot_cores": median([i["slot_cores"] for i in idle], 3),
                 "per_slot": idle},
        "episodes": {"per_slot": args.episodes, "episodes": len(episodes),
                     "completed": completed,
                     "succeeded": sum(e["succeeded"] for e in episodes),
                     "wall_s": round(wall_s, 1), "episodes_per_min": per_minute(completed,
                                                                                 wall_s),
                     "episode_s": median([e["episode_s"] for e in episodes]),
                     "verdicts": [e["verdict"] for e in episodes]},
        "loadavg_before": before, "loadavg_after": loadavg(),
    }
    log.info("bench.chimerax_slots", slots=n, launch_ready_s=figures["launch_ready_s"],
             reset_s=figures["reset_s"], episodes_per_min=figures["episodes"]["episodes_per_min"])
    return figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    task = load_task_file(TASKS / f"{args.task}.json")
    counts = {str(n): measure_slots(n, task, args) for n in args.slots}
    idles = [i for f in counts.values() for i in f["idle"]["per_slot"]]
    return {
        "what": "ChimeraX (RBVI's sources and ScienceBoard's states bundle, scripts/chimerax.sh) "
                "on local slots (worker.providers.local), 1 to n slots at once",
        "build": str(build.prefix()),
        "task": f"ChimeraX/{args.task}",
        "solution": list(SOLUTIONS[args.task]),
        "options": {"shots": args.shots, "idle_s": args.idle_s, "settle_s": args.settle_s,
                    "episodes_per_slot": args.episodes},
        "slots": counts,
        "idle_goal": goal([i["chimerax_cores"] for i in idles], [i["slot_cores"] for i in idles]),
        "container": None,
        "container_reason": NO_CONTAINER,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--task", default="A-04", choices=sorted(SOLUTIONS))
    parser.add_argument("--shots", type=int, default=5,
                        help="screenshots and states dumps per slot")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--settle-s", type=float, default=5.0,
                        help="wait after the last command before the idle window")
    parser.add_argument("--episodes", type=int, default=3, help="episodes per slot")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/chimerax.json"))
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.shots < 1 or min(args.slots) < 1:
        parser.error("--episodes, --shots and every --slots count must be at least 1")
    configure_bench_logging()
    if not build.is_built():
        raise SystemExit(f"ChimeraX is not built: {build.BUILD_HINT}")
    before = loadavg()
    result = run(args)
    result["machine"] = machine(before)
    result["at"] = datetime.now(UTC).isoformat(timespec="seconds")
    write_result(args.out, result)


if __name__ == "__main__":
    main()
