"""The verification figures page, rendered from the benchmarks' own JSON (never hand-copied).

``python -m benchmarks.figures_doc > docs/figures.md`` writes it; ``tests/test_docs.py`` fails
when the committed page differs from what the JSON in ``benchmarks/results/`` gives. Each
section names the JSON it reads and the script that writes that JSON; a figure the JSON does
not (yet) hold reads "not measured", so a section can list figures before their first run.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.figures_fleet import render_fleet

RESULTS = Path(__file__).resolve().parent / "results"
MISSING = "not measured"


@dataclass(frozen=True)
class Figure:
    """One row: a label and the path of keys to its value in the section's JSON."""

    label: str
    path: tuple[str | int, ...]
    unit: str = ""
    digits: int = 2


@dataclass(frozen=True)
class Section:
    title: str
    source: str  # file name under benchmarks/results/
    script: str  # the command that writes it
    figures: tuple[Figure, ...]
    when: tuple[str | int, ...] | None = None  # path of the measurement's date, if recorded
    note: str = ""


def F(label: str, *path: str | int, unit: str = "", digits: int = 2) -> Figure:
    """A figure at the path of keys ``path``."""
    return Figure(label, tuple(path), unit, digits)


def _route(route: str, key: str) -> tuple[str, ...]:
    return ("routes", route, key)


SECTIONS: tuple[Section, ...] = (
    Section(
        "Desktops: local slots and desktop containers", "env.json",
        "python -m benchmarks.env --docker",
        (
            F("local: reset to ready (median of the resets)", "reset_ready_s", unit="s", digits=3),
            F("local: first start", "first_start_s", unit="s", digits=3),
            F("local: screenshot 1280x800 PNG over HTTP", "screenshot_ms_1280x800_png",
              unit="ms"),
            F("OSWorld's screenshot method, same display", "osworld_screenshot_ms_1280x800_png",
              unit="ms"),
            F("screenshot speed-up vs OSWorld", "screenshot_speedup_vs_osworld", unit="x"),
            F("a click answered (typed action)", "action_roundtrip_ms", unit="ms"),
            F("OSWorld's `python -c pyautogui` click", "osworld_action_roundtrip_ms", unit="ms"),
            F("container: reset to ready, revert", "docker_reset_ready_s", "revert", unit="s",
              digits=3),
            F("container: reset to ready, recreate", "docker_reset_ready_s", "recreate",
              unit="s", digits=3),
            F("container: screenshot 1280x800 PNG", "docker_screenshot_ms_1280x800_png",
              unit="ms"),
            F("container: memory per slot, idle", "docker_memory_mib_per_slot", "idle",
              unit="MiB", digits=1),
            F("container: memory per slot, TeXstudio open", "docker_memory_mib_per_slot",
              "texstudio_open", unit="MiB", digits=1),
            F("worker's own time per step, 1 slot (median)", "step_overhead_ms", unit="ms"),
            F("worker's own time per step, 1 slot (p90)", "step_overhead_ms_p90", unit="ms"),
            F("worker's own time per step, 4 slots (median)", "step_overhead_ms_4_slots",
              unit="ms"),
            F("episodes per minute, 4 local slots", "episodes_per_min"),
            F("episodes per minute, 4 desktop containers", "docker_episodes_per_min"),
            F("containers / local episodes per minute", "docker_vs_local_episodes_per_min"),
            F("GRASS GIS: launch to ready, local", "grass_launch_ready_s", unit="s"),
            F("GRASS GIS: reset to ready, local", "grass_reset_ready_s", unit="s"),
            F("GRASS GIS: launch to ready, container", "docker_grass_launch_ready_s", unit="s"),
            F("GRASS GIS: reset to ready, container", "docker_grass_reset_ready_s", unit="s"),
            F("vSphere (vcsim): first start, clone", "vsphere_first_start_s", "clone", unit="s"),
            F("vSphere (vcsim): reset to ready, clone", "vsphere_reset_ready_s", "clone",
              unit="s"),
            F("vSphere (vcsim): reset to ready, revert", "vsphere_reset_ready_s", "revert",
              unit="s"),
            F("episodes per minute, vSphere slots", "vsphere_episodes_per_min"),
            F("episodes per minute, docker slots beside them", "vsphere_docker_episodes_per_min"),
            F("vSphere / docker episodes per minute", "vsphere_vs_docker_episodes_per_min"),
        ),
        when=("at",),
        note="TeXstudio C-02 with the model services on the replay backend; `machine` in the "
             "JSON has the load average before and after.",
    ),
    Section(
        "Celestia: a slot's cost, local and in a desktop container", "celestia.json",
        "python -m benchmarks.celestia",
        (
            F("local: launch to ready (A-04, median)", "launch_ready_s", unit="s"),
            F("local: reset with Celestia open", "reset_s", unit="s"),
            F("local: screenshot over HTTP", "screenshot_ms", unit="ms"),
            F("local: state dump through the agent", "dump_ms", unit="ms"),
            F("local: idle CPU, frame cap on", "idle_cpu_cores", "capped", unit="cores",
              digits=3),
            F("local: idle CPU, frame cap off", "idle_cpu_cores", "uncapped", unit="cores",
              digits=3),
            F("container: launch to ready (A-04, median)", "container", "launch_ready_s",
              unit="s"),
            F("container: reset with Celestia open", "container", "reset_s", unit="s"),
            F("container: screenshot over HTTP", "container", "screenshot_ms", unit="ms"),
            F("container: state dump through the agent", "container", "dump_ms", unit="ms"),
            *(F(f"{where}: episodes per minute, {n} slot{'s' * (n > 1)} (A-02 replayed)",
                "episodes", provider, str(n), "episodes_per_min")
              for where, provider in (("local", "local"), ("container", "docker"))
              for n in (1, 2, 4)),
        ),
        when=("at",),
        note="Each episode-rate run's load averages before and after it are in the JSON: the "
             "2-core machine was shared with other work.",
    ),
    Section(
        "ChimeraX: a slot's cost on local desktops, 1, 2 and 4 slots at once", "chimerax.json",
        "python -m benchmarks.chimerax",
        (
            *(F(f"{n} slot{'s' * (n > 1)}: {label}", "slots", str(n), *path, unit=unit,
                digits=digits)
              for n in (1, 2, 4)
              for label, path, unit, digits in (
                  ("launch to ready (REST answering, median)", ("launch_ready_s",), "s", 2),
                  ("reset with ChimeraX open (median)", ("reset_s",), "s", 2),
                  ("screenshot over HTTP", ("screenshot_ms",), "ms", 1),
                  ("states dump through the agent", ("states_dump_ms",), "ms", 1),
                  ("idle CPU, ChimeraX's processes (median slot)",
                   ("idle", "chimerax_cores"), "cores", 3),
                  ("idle CPU, whole desktop (median slot)", ("idle", "slot_cores"), "cores",
                   3),
                  ("episodes per minute (A-04, right solution)",
                   ("episodes", "episodes_per_min"), "", 2))),
            F("idle goal: an idle Celestia's 0.15 cores, met", "idle_goal", "met"),
            F("... ChimeraX's worst idle slot", "idle_goal", "chimerax_cores_max",
              unit="cores", digits=3),
        ),
        when=("at",),
        note="Every phase ran in all the slots of a count at once; the load averages at the "
             "start and end and around each slot count are in the JSON (the 2-core machine "
             "was shared with other work). Desktop containers: not measured, the coda-desktop "
             "image does not carry ChimeraX yet.",
    ),
    Section(
        "Master under load", "master_load_kit_w1.json",
        "python -m benchmarks.master_load --slots 1000 --duration 90 --workers 1",
        (
            F("simulated slots", "slots", digits=0),
            F("requests per second", "requests_per_s"),
            F("p50", "p50_ms", unit="ms"),
            F("p99", "p99_ms", unit="ms"),
            F("max", "max_ms", unit="ms"),
            F("errors", "errors", digits=0),
            F("utilisation", "utilization", digits=4),
            F("lease p99", *_route("POST /v1/jobs/lease", "p99_ms"), unit="ms"),
            F("step report p99", *_route("POST /v1/jobs/{job_id}/steps", "p99_ms"), unit="ms"),
            F("heartbeat p99", *_route("POST /v1/jobs/{job_id}/heartbeat", "p99_ms"),
              unit="ms"),
        ),
        note="A step every 2 s, a heartbeat every 5 s, one uvicorn process, the machine's "
             "PostgreSQL 15 and Redis 7; `benchmarks/results/master_load.summary.md` has the "
             "history of the figure.",
    ),
    Section(
        "Master: one batch of 10,000 tasks", "master_batch.json",
        "python -m benchmarks.master_batch",
        (
            F("submit 10,000 tasks (21.7 MiB)", "submit", "seconds", unit="s"),
            F("a duplicate refused", "duplicate_refused", "seconds", unit="s"),
            F("lease p99 while idle", "idle", "lease", "p99_ms", unit="ms"),
        ),
    ),
    Section(
        "Sampling: batched vs sequential (tiny model, transformers, CPU)", "sampling.json",
        "python -m benchmarks.sampling",
        (
            F("8 plans in one call", "plan_batch_s", unit="s", digits=3),
            F("8 plans, 8 calls", "plan_sequential_s", unit="s", digits=3),
            F("plan speed-up", "plan_batch_speedup", unit="x"),
            F("executor batch of 8", "act_batch_s", unit="s", digits=3),
            F("executor, 8 calls", "act_sequential_s", unit="s", digits=3),
            F("executor speed-up", "act_batch_speedup", unit="x"),
        ),
        when=("timestamp",),
    ),
    Section(
        "Serving: vLLM's CPU build vs the transformers backend (tiny model)", "serving.json",
        "python -m benchmarks.serving",
        (
            F("plans per second, vLLM (G=8)", "vllm", "plans_per_s"),
            F("plans per second, transformers", "transformers", "plans_per_s"),
            F("plans ratio vLLM / transformers", "plans_per_s_ratio"),
            F("executor actions per second, vLLM", "vllm", "actions_per_s"),
            F("executor actions per second, transformers", "transformers", "actions_per_s"),
            F("judge call, vLLM", "vllm", "judge_call_s", unit="s", digits=3),
            F("judge call, transformers", "transformers", "judge_call_s", unit="s", digits=3),
            F("log-prob parity: max |diff| (trainer vs vLLM)", "logprob_parity",
              "max_abs_diff", digits=8),
            F("log-prob parity: mean |diff|", "logprob_parity", "mean_abs_diff", digits=8),
            F("vLLM start", "vllm_start_s", unit="s", digits=1),
            F("planner version served again after vLLM is back", "version_recovery_s",
              unit="s", digits=1),
            F("... after the kill -9", "version_recovery_from_kill_s", unit="s", digits=1),
        ),
        when=("measured_at",),
    ),
    Section(
        "Trainer: one GRPO update, shared prompt encoding", "trainer.json",
        "python -m benchmarks.trainer",
        (
            F("update, shared prompt (G=8)", "shared", "update_s", unit="s", digits=3),
            F("update, each plan encoded separately", "separate", "update_s", unit="s",
              digits=3),
            F("time ratio shared / separate", "shared_prefix_ratio", digits=3),
            F("peak memory, shared", "shared", "peak_memory_mb", unit="MB", digits=0),
            F("peak memory, separate", "separate", "peak_memory_mb", unit="MB", digits=0),
        ),
        when=("created_at",),
    ),
    Section(
        "Trainer: learning curve on a synthetic reward", "trainer_learning_curve.json",
        "CODA_LEARNING_CURVE_OUT=FILE pytest tests/trainer/test_learning.py",
        (
            F("reward mean before training", "curve", 0, "reward_mean", digits=3),
            F("reward mean after the last update", "curve", -1, "reward_mean", digits=3),
            F("target", "target", digits=2),
        ),
    ),
    Section(
        "docker compose up, end to end", "compose_e2e.json",
        "pytest tests/deploy/test_compose_e2e.py",
        (
            F("test wall time (first run)", "runs", 0, "test_s", unit="s", digits=1),
            F("submit to a new planner version", "runs", 0, "submit_to_version_s", unit="s",
              digits=0),
            F("planner version published", "runs", 0, "planner_version"),
            F("desktop image cold build", "image_builds_cold_s",
              "coda-desktop (--no-cache, under load average ~9)", unit="s", digits=0),
            F("desktop image size", "image_sizes", "coda-desktop"),
        ),
        when=("date",),
    ),
    Section(
        "A fleet: failover and rolling upgrade (three VM servers, one master)", "fleet.json",
        "python -m benchmarks.fleet",
        (
            F("kill -> its episode queued again (lease TTL 10 s)", "failover",
              "time_to_requeue_s", unit="s", digits=1),
            F("kill -> leased by another server", "failover", "time_to_re_lease_s", unit="s",
              digits=1),
            F("failover: episodes lost", "failover", "episodes_lost", digits=0),
            F("failover: episodes doubled", "failover", "episodes_doubled", digits=0),
            F("failover: judge jobs per episode", "failover", "judge_jobs_per_episode",
              digits=0),
            F("drain (SIGTERM) to the worker gone", "rolling_upgrade", "drain_s", unit="s",
              digits=1),
            F("upgrade: episodes re-queued", "rolling_upgrade", "episodes_requeued", digits=0),
            F("upgrade: episodes lost", "rolling_upgrade", "episodes_lost", digits=0),
            F("coda up: planner killed -> ready again (first restart)", "supervise",
              "restarts", 0, "kill_to_ready_s", unit="s", digits=1),
        ),
        when=("failover", "date"),
    ),
    Section(
        "A fleet: capacity of one VM server (desktop containers vs local desktops)",
        "fleet.json", "python -m benchmarks.capacity",
        (*(F(f"{n} slots: container / local episodes per minute", "capacity", "curve", i,
             "ratio") for i, n in enumerate((1, 2, 4, 8))),
         *(F(f"{n} slots: machine CPU per episode, {prov}", "capacity", "curve", i, prov,
             "machine_cpu_s_per_episode", unit="s")
           for i, n in ((0, 1), (3, 8)) for prov in ("docker", "local")),
         F("target ratio", "capacity", "ratio_target")),
        when=("capacity", "at"),
    ),
    Section(
        "A fleet: the master at 10,000 slots and past its capacity", "fleet.json",
        "python -m benchmarks.master_load --fleet-key NAME",
        (
            F("10,000 slots, paper cadence, 2 processes: p99", "master_scale",
              "slots_10000_2_processes", "p99_ms", unit="ms", digits=0),
            F("... errors", "master_scale", "slots_10000_2_processes", "errors", digits=0),
            F("... one call per step report instead: p99", "master_scale",
              "slots_10000_2_processes_step_per_call", "p99_ms", unit="ms", digits=0),
            F("10,000 slots, 1 process: p99", "master_scale", "slots_10000", "p99_ms",
              unit="ms", digits=0),
            F("2,000 slots, fast cadence, shedding on: p99", "master_scale",
              "fast_2000_shedding_quiet_machine", "p99_ms", unit="ms", digits=0),
            F("2,000 slots, fast cadence, shedding off: p99", "master_scale",
              "fast_2000_no_shedding_quiet_machine", "p99_ms", unit="ms", digits=0),
        ),
    ),
    Section(
        "Infrastructure faults: what they cost, how long recovery takes", "faults.json",
        "python -m benchmarks.faults --rebuild desktop --rebuild master",
        (
            F("master killed mid-episode: outage", "faults", "master_killed_mid_episode",
              "outage_s", unit="s"),
            F("... next step stored after it is back", "faults", "master_killed_mid_episode",
              "next_step_stored_after_return_s", unit="s"),
            F("... attempts the episode spent", "faults", "master_killed_mid_episode",
              "attempts", digits=0),
            F("vSphere password rotated: job given back after", "faults",
              "vsphere_password_rotated", "given_back_after_submit_s", unit="s"),
            F("... leased again after the password is back", "faults",
              "vsphere_password_rotated", "leased_after_fix_s", unit="s"),
            F("vSphere template deleted: given back after", "faults",
              "vsphere_template_deleted", "given_back_after_submit_s", unit="s"),
            F("... leased again after it is put back", "faults", "vsphere_template_deleted",
              "leased_after_fix_s", unit="s"),
            F("vSphere simulator killed: given back after", "faults",
              "vsphere_simulator_killed", "given_back_after_submit_s", unit="s"),
            F("... leased again after it is back", "faults", "vsphere_simulator_killed",
              "leased_after_fix_s", unit="s"),
            F("Docker image missing: leased after it is tagged", "faults",
              "docker_image_missing_at_start", "leased_after_tag_s", unit="s"),
            F("local program missing: leased after it is installed", "faults",
              "local_program_missing_at_start", "leased_after_install_s", unit="s"),
            F("Redis stopped during 12 submissions: batches made", "faults",
              "redis_stopped_during_submits", "batches", digits=0),
            F("... every episode leased after Redis is back", "faults",
              "redis_stopped_during_submits", "every_episode_leased_after_redis_back_s",
              unit="s"),
            F("PostgreSQL stopped: 500 answers", "faults", "postgres_stopped", "answers_500",
              digits=0),
            F("desktop image: rebuild, nothing changed", "rebuilds", "desktop",
              "rebuild_unchanged_s", unit="s"),
            F("desktop image: rebuild after a code change", "rebuilds", "desktop",
              "rebuild_after_a_code_change_s", unit="s"),
        ),
        note="Faults injected from outside by the fault tests (tests/fixtures/faults.py); "
             "the worker probes its provider every 1 s doubling up to 2 s there (30 s by "
             "default). Every episode ran with max_attempts 1: none failed.",
    ),
)


def lookup(data: Any, path: Iterable[str | int]) -> Any:
    """The value at ``path`` (dict keys, list indices), or None when any step is absent."""
    for key in path:
        in_list = isinstance(key, int) and isinstance(data, list) and -len(data) <= key < len(data)
        in_dict = isinstance(key, str) and isinstance(data, dict) and key in data
        if not (in_list or in_dict):
            return None
        data = data[key]
    return data


def fmt(value: Any, figure: Figure) -> str:
    if value is None:
        return MISSING
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value):
        text = str(value)
    elif figure.digits == 0:
        text = f"{round(value):,}"
    else:
        text = f"{value:,.{figure.digits}f}" if abs(value) >= 1e-3 else f"{value:.2e}"
    return f"{text} {figure.unit}".rstrip()


def load(results: Path, name: str) -> Any:
    path = results / name
    return json.loads(path.read_text()) if path.is_file() else None


def render_coverage(results: Path) -> list[str]:
    data = load(results, "coverage-local.json")
    if data is None:
        return []
    lines = ["## Task coverage on the local image", "",
             "Source: `benchmarks/results/coverage-local.json`, written by "
             "`coda tasks coverage examples/scienceboard --provider local --json FILE`; "
             "the reasons are in `docs/coverage.md`.", "",
             "| application | tasks | real verdicts here |", "| --- | ---: | ---: |"]
    for row in [*data.get("apps", []), data.get("total", {})]:
        lines.append(f"| {row.get('app', '?')} | {row.get('tasks', MISSING)} | "
                     f"{row.get('runnable', MISSING)} |")
    return [*lines, ""]


def _pct(value: Any) -> str:
    return MISSING if value is None else f"{100 * value:.0f} %"


def _interval(m: dict[str, Any]) -> str:
    return f"{_pct(m.get('rate'))} ({_pct(m.get('ci_low'))}-{_pct(m.get('ci_high'))})"


def _chart(title: str, run: dict[str, Any]) -> list[str]:
    curve = run.get("curve") or []
    labels = ", ".join(f'"{m.get("round", i)}"' for i, m in enumerate(curve))
    values = ", ".join(f"{100 * (m.get('rate') or 0):.0f}" for m in curve)
    return ["```mermaid", "xychart-beta", f'    title "{title}"',
            f'    x-axis "round (one version measured each; updates so far in the table)" '
            f'[{labels}]', '    y-axis "success (%)" 0 --> 100',
            f"    bar [{values}]", f"    line [{values}]", "```", ""]



CONTROL_NAMES = {"shuffle": "derangement", "derangement": "derangement", "uniform": "uniform",
                 "zero": "zero"}  # `shuffle`: what the derangement was called before
CONTROL_MEANINGS = {
    "derangement": "each group's rewards permuted so that no plan keeps its own (an "
                   "anti-learning control: each plan gets -1/(G-1) of its advantage in "
                   "expectation)",
    "uniform": "each group's rewards permuted uniformly at random (a null: a plan may keep "
               "its own)",
    "zero": "no optimizer step at all (a null: the warm start measured again)",
}

def render_learning(results: Path) -> list[str]:
    """The closed-loop run and its controls: figures, every curve drawn, and the table behind
    each (version, success with its interval, the update's mean group reward; with a document
    of issue 37 point 6's benchmark also its mean importance weight, the Fisher p, the novel
    rewarded plans, the controls against the warm start's interval and the transfer)."""
    data = load(results, "learning.json")
    lines = ["## The closed loop learns (`coda learn`)", ""]
    src = ("Source: `benchmarks/results/learning.json`, written by "
           "`python -m benchmarks.learning` (docs/trainer.md)")
    if data is None:
        return [*lines, f"{src}: not measured yet.", ""]
    summary = data.get("summary", {})
    several = "controls" in data  # point 6's document: a list of controls and more figures
    controls = summary.get("controls", []) if several else [summary.get("control") or {}]
    kinds = [CONTROL_NAMES.get(str(c.get("reward_control")), "derangement") for c in controls]
    lines.append(f"{src}; measured {data.get('created_at', '?')}. Success rates are the tasks' "
                 "own checkers on fresh episodes of each planner version, with 95 % Wilson "
                 "intervals; " + _controls_said(kinds, several) + ".")
    lines += ["", "| figure | value |", "| --- | ---: |"]
    rows = [
        ("warm start (stage-2 SFT) success", _pct(summary.get("warm_start_rate"))),
        ("target", _pct((data.get("run") or {}).get("target"))),
        ("updates to reach it", MISSING if summary.get("reached_after_updates") is None
         else str(summary["reached_after_updates"])),
        ("last version's success", _pct(summary.get("final_rate"))),
        ("run, wall time (warm start included)", f"{summary.get('run_minutes', MISSING)} min"),
    ]
    rows += _point6_rows(summary) if several else []
    for kind, control in zip(kinds, controls, strict=True):
        name = f"control `{kind}`" if several else "control"
        rows += [(f"{name}: first / last / best success", " / ".join(
                     _pct(control.get(k)) for k in ("first_rate", "last_rate", "max_rate"))),
                 (f"{name}: updates", str(control.get("updates", MISSING)))]
        if several:
            rows += [(f"{name}: a version above the warm start's 95 % interval",
                      _yes(control.get("rose_above_warm_start_interval"))),
                     (f"{name}: fell from the warm start by (last / most)", " / ".join(
                         _points(control.get(k)) for k in ("fall_from_warm_start",
                                                           "largest_fall_from_warm_start")))]
    rows += [
        ("episodes or steps with another version than their batch's",
         str(summary.get("version_mismatches", MISSING))),
        ("groups trained as another version's", str(summary.get("groups_off_version", MISSING))),
        ("executor unchanged (files and backend)", str(summary.get("executor_unchanged"))),
    ]
    docker = load(results, "learning-docker.json")
    if docker is not None:
        d = docker.get("summary", {})
        rows += [("the same run in desktop containers: warm start / last version",
                  f"{_pct(d.get('warm_start_rate'))} / {_pct(d.get('final_rate'))}"),
                 ("... updates, minutes", f"{d.get('updates', MISSING)}, "
                                          f"{d.get('run_minutes', MISSING)} min")]
    lines += [f"| {label} | {value} |" for label, value in rows]
    lines.append("")
    runs = [("run", "run: success per version", data.get("run"))]
    if several:
        runs += [(f"control {k}", f"control ({k}): success per version", c)
                 for k, c in zip(kinds, data.get("controls") or [], strict=False)]
    else:
        runs.append(("control", f"control ({kinds[0]}): success per version",
                     data.get("control")))
    for key, title, run in runs:
        if run:
            lines += _curve(key, title, run, weights=several)
    return lines


def _controls_said(kinds: list[str], several: bool) -> str:
    if not several:
        return f"the control (`{kinds[0]}`) is the same run with {CONTROL_MEANINGS[kinds[0]]}"
    if not kinds:
        return "no control was run"
    return ("each control is the same run from the same warm start with one thing taken away: "
            + "; ".join(f"`{k}`, {CONTROL_MEANINGS[k]}" for k in kinds))


def _yes(value: Any) -> str:
    return MISSING if value is None else ("yes" if value else "no")


def _points(value: Any) -> str:
    return MISSING if value is None else f"{100 * value:.0f} points"


def _p(value: Any) -> str:
    return MISSING if value is None else f"{value:.2g}"


def _point6_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures issue 37 point 6 added (only in documents that have them)."""
    transfer = summary.get("transfer")
    return [
        ("no recording in the loop (executor / judge)",
         f"{_yes(summary.get('recording_free'))} ({summary.get('executor_backend', MISSING)} / "
         f"{summary.get('judge_backend', MISSING)})"),
        ("tasks, episodes per version (least)",
         f"{len(summary.get('tasks') or [])}, "
         f"{summary.get('episodes_per_version_min', MISSING)}"),
        ("last version above the warm start: one-sided Fisher p (last two pooled)",
         f"{_p(summary.get('final_p_vs_warm_start'))} "
         f"({_p(summary.get('last_two_p_vs_warm_start'))})"),
        (f"distinct plans rewarded >= {summary.get('rewarded_at_least', 0.9)} never in the "
         "warm-start data (of all rewarded)",
         f"{summary.get('novel_rewarded_plans', MISSING)} "
         f"(of {summary.get('rewarded_plans', MISSING)})"),
        ("transfer: the last version on a task outside the curricula (no target)",
         MISSING if not transfer else
         f"{Path(str(transfer.get('task'))).name}: {_pct(transfer.get('rate'))} "
         f"({_pct((transfer.get('ci') or [None])[0])}-"
         f"{_pct((transfer.get('ci') or [None, None])[1])}), "
         f"{transfer.get('rollouts', MISSING)} episodes"),
    ]


def _curve(key: str, title: str, run: dict[str, Any], *, weights: bool) -> list[str]:
    """A run's chart and its table by version (``weights``: with the mean importance weight)."""
    lines = _chart(title, run)
    trained = {u["policy_version"]: u["metrics"] for u in run.get("updates", [])}
    extra = " mean importance weight |" if weights else ""
    lines += [f"| {key}: version | updates | rollouts | success (95 % interval) | "
              "mean group reward of its update |" + extra,
              "| --- | ---: | ---: | ---: | ---: |" + (" ---: |" if weights else "")]
    for m in run.get("curve", []):
        metrics = trained.get(m["planner_version"]) or {}
        reward, weight = metrics.get("reward_mean"), metrics.get("is_weight_mean")
        cells = f"| {'-' if reward is None else f'{reward:.3f}'} |"
        if weights:
            cells += f" {'-' if weight is None else f'{weight:.3f}'} |"
        lines.append(f"| {m['planner_version']} | {m['update']} | {m['rollouts']} | "
                     f"{_interval(m)} " + cells)
    lines.append("")
    return lines


def render_section(section: Section, results: Path) -> list[str]:
    data = load(results, section.source)
    lines = [f"## {section.title}", ""]
    src = f"Source: `benchmarks/results/{section.source}`, written by `{section.script}`"
    if data is None:
        return [*lines, f"{src}: not measured yet.", ""]
    when = lookup(data, section.when) if section.when else None
    lines.append(f"{src}" + (f"; measured {when}." if when else "."))
    if section.note:
        lines.append(section.note)
    lines += ["", "| figure | value |", "| --- | ---: |"]
    lines += [f"| {f.label} | {fmt(lookup(data, f.path), f)} |" for f in section.figures]
    return [*lines, ""]


def render(results: Path = RESULTS) -> str:
    lines = [
        "# Verification figures",
        "",
        "Generated from the JSON the benchmarks write (`python -m benchmarks.figures_doc > "
        "docs/figures.md`; a test fails when this page is stale). Every figure was measured on "
        "the project's 2-core, 24 GiB development machine without a GPU unless its JSON says "
        "otherwise; the JSON files hold the runs, spreads and machine load behind each number.",
        "",
    ]
    lines += render_coverage(results)
    lines += render_learning(results)
    for section in SECTIONS:
        lines += render_section(section, results)
    lines += render_fleet(results, load)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
