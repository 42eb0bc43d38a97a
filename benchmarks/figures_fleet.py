"""The fleet's tables on the figures page (docs/figures.md), rendered from
``benchmarks/results/fleet.json``: a VM server's capacity per slot count and its earlier runs,
the master at fleet scale, failover and the rolling upgrade, restarts under ``coda up``.
docs/fleet.md links these sections instead of typing the figures; the story of the runs is in
``benchmarks/results/fleet.history.md``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

MISSING = "not measured"
SOURCE = "fleet.json"
MASTER_SCALE_ORDER = ("slots_10000_2_processes", "slots_10000",
                      "slots_10000_2_processes_step_per_call", "slots_3000",
                      "fast_2000_shedding_quiet_machine", "fast_2000_no_shedding_quiet_machine",
                      "overload_2000_fast_shedding", "overload_2000_fast_no_shedding")
"""The runs of ``master_scale`` in the order the table shows them (newest cadence first); a
run not named here follows, by name."""


def _table(header: Sequence[str], align: Sequence[str], rows: list[list[str]]) -> list[str]:
    return [f"| {' | '.join(header)} |", f"| {' | '.join(align)} |",
            *(f"| {' | '.join(row)} |" for row in rows), ""]


def _num(value: Any, digits: int = 2) -> str:
    if value is None:
        return MISSING
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return f"{value:,.{digits}f}" if digits else f"{round(value):,}"


def _runs(values: Sequence[Any] | None, digits: int | None = None) -> str:
    return ", ".join(str(v) if digits is None else _num(v, digits) for v in values or [])


def _sentence(text: Any) -> str:
    text = str(text or "").rstrip(".")
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def _source(key: str, command: str) -> str:
    """Where a section's figures come from: fleet.json's ``key``, written by ``command``."""
    return f"Source: `benchmarks/results/{SOURCE}` (key `{key}`), written by `python -m {command}`"


def render_capacity(cap: dict[str, Any]) -> list[str]:
    cfg = cap.get("config", {})
    lines = ["## A fleet: one VM server's capacity, per slot count", "",
             _source("capacity", "benchmarks.capacity") +
             f"; measured {cap.get('at', '?')}, "
             f"{cfg.get('repeats', '?')} repeats, {cfg.get('episodes_per_slot', '?')} measured "
             f"episodes per slot, {cfg.get('app', '?')} on the {cfg.get('models', '?')}. "
             "Medians of the repeats, each repeat's ratio in brackets; machine CPU is the whole "
             "machine's busy CPU over the batch per episode.", ""]
    rows = []
    for c in cap.get("curve", []):
        d, loc = c.get("docker", {}), c.get("local", {})
        rows.append([
            str(c.get("slots")), _num(d.get("episodes_per_min", {}).get("median"), 1),
            _num(loc.get("episodes_per_min", {}).get("median"), 1),
            f"{_num(c.get('ratio'))} ({_runs(c.get('ratio_runs'), 2)})",
            f"{_num(d.get('machine_cpu_s_per_episode'))} / "
            f"{_num(loc.get('machine_cpu_s_per_episode'))}",
            f"{_num(d.get('reset_s_median'))} / {_num(loc.get('reset_s_median'))}",
            f"{_num(d.get('mem_mib_per_slot'), 0)} / {_num(loc.get('mem_mib_per_slot'), 0)}"])
    lines += _table(["slots", "docker ep/min", "local ep/min", "docker/local",
                     "machine CPU s / episode (docker / local)", "reset s (docker / local)",
                     "memory MiB per slot (docker / local)"],
                    ["---", "---:", "---:", "---", "---", "---", "---"], rows)
    previous = cap.get("previous_runs", [])
    if previous:
        slots = [str(n) for n in cfg.get("slots", [1, 2, 4, 8])]
        lines += ["Earlier runs (key `capacity.previous_runs`, newest first): docker/local "
                  "ratio per slot count.", ""]
        lines += _table(["measured", *(f"{n} slots" for n in slots), "what differed"],
                        ["---", *("---:" for _ in slots), "---"],
                        [[p.get("at", "?"), *(_num(p.get("ratios", {}).get(n)) for n in slots),
                          p.get("note", "")] for p in previous])
    return lines


def _shedding(run: dict[str, Any]) -> str:
    return "off" if run.get("master_settings", {}).get("CODA_SHED_MAX_IN_FLIGHT") == "0" \
        else "on"


def _step_reports(cadence: dict[str, Any]) -> str:
    window = cadence.get("step_window_s")
    return f"batched ({window:g} s)" if window else "one call each"


def render_master_scale(scale: dict[str, Any]) -> list[str]:
    lines = ["## A fleet: the master at fleet scale, every run", "",
             _source("master_scale", "benchmarks.master_load --fleet-key NAME") +
             ". Latencies are client-side, "
             "of admitted requests; `master / other cores` is the master's CPU and that of "
             "processes outside the benchmark over the window.", ""]
    keys = [k for k in MASTER_SCALE_ORDER if k in scale]
    keys += sorted(k for k in scale if k not in MASTER_SCALE_ORDER)
    rows = []
    for key in keys:
        r = scale[key]
        cad = r.get("cadence", {})
        cores = r.get("cores_used", {})
        rows.append([
            f"`{key}`", _num(r.get("slots")),
            f"{cad.get('step_s', 0):g} / {cad.get('heartbeat_s', 0):g} / "
            f"{cad.get('episode_s', 0):g}", _step_reports(cad),
            str(r.get("master_processes")), _shedding(r), _num(r.get("requests_per_s")),
            _num(r.get("p50_ms")), _num(r.get("p99_ms")), _num(r.get("max_ms")),
            _num(r.get("errors")), f"{_num(r.get('shed'))} ({_num(r.get('shed_per_s'))})",
            _num(r.get("utilization"), 4), _num(r.get("lost_leases")),
            f"{_num(cores.get('master'), 3)} / {_num(cores.get('other_processes'), 3)}"])
    return lines + _table(
        ["run (`master_scale.<key>`)", "slots", "cadence (step / heartbeat / episode s)",
         "step reports", "master processes", "shedding", "admitted req/s", "p50 ms", "p99 ms",
         "max ms", "errors", "503s (per s)", "utilisation", "lost leases",
         "master / other cores"],
        ["---", "---:", "---", "---", "---:", "---", "---:", "---:", "---:", "---:", "---:",
         "---:", "---:", "---:", "---"], rows)


FAILOVER = (("kill -> its episode queued again", "time_to_requeue_s", " s"),
            ("kill -> leased by another VM server", "time_to_re_lease_s", " s"),
            ("episodes lost", "episodes_lost", ""),
            ("episodes doubled", "episodes_doubled", ""),
            ("judge jobs per episode", "judge_jobs_per_episode", ""),
            ("attempts of the killed episode", "killed_episode_attempts", ""),
            ("stale desktop containers removed when it came back",
             "stale_desktops_removed_on_return", ""))
UPGRADE = (("drain (SIGTERM) until the worker exited", "drain_s", " s"),
           ("episodes finished within the grace", "episodes_finished_in_grace", ""),
           ("episodes handed back and re-queued", "episodes_requeued", ""),
           ("episodes lost", "episodes_lost", ""),
           ("episodes doubled", "episodes_doubled", ""))


def _medians(data: dict[str, Any], figures: Sequence[tuple[str, str, str]]) -> list[str]:
    return _table(["figure", "median", "runs"], ["---", "---:", "---"],
                  [[label, f"{data.get(key, MISSING)}{unit}", _runs(data.get(f"{key}_runs"))]
                   for label, key, unit in figures])


def render_operations(data: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    failover = data.get("failover")
    if failover:
        lines += ["## A fleet: failover, every run", "",
                  _source("failover", "benchmarks.fleet") +
                  f"; {failover.get('runs')} runs, "
                  f"{failover.get('date')}, lease TTL {failover.get('lease_ttl_s')} s, "
                  f"heartbeats every {failover.get('heartbeat_s')} s. "
                  f"{_sentence(failover.get('what'))}",
                  "", *_medians(failover, FAILOVER)]
    upgrade = data.get("rolling_upgrade")
    if upgrade:
        lines += ["## A fleet: draining and upgrading a VM server, every run", "",
                  _source("rolling_upgrade", "benchmarks.fleet") +
                  f"; {upgrade.get('runs')} runs, "
                  f"{upgrade.get('date')}, {upgrade.get('drain_grace_s')} s grace. "
                  f"{_sentence(upgrade.get('what'))}", "", *_medians(upgrade, UPGRADE)]
    sup = data.get("supervise")
    if sup:
        lines += ["## A fleet: restarts under `coda up`", "",
                  _source("supervise", "benchmarks.supervise") +
                  f"; measured {sup.get('date')}: the "
                  f"{sup.get('service')} killed once per row under the restart policy, "
                  "ready again (its `/readyz`) after the backoff and the overhead (noticing "
                  "it, starting Python, loading the service); machine load average "
                  f"{_runs(sup.get('machine', {}).get('loadavg_before'))} before.", ""]
        lines += _table(["restart", "backoff s", "kill -> ready s", "overhead s"],
                        ["---:", "---:", "---:", "---:"],
                        [[str(r.get("restart")), _num(r.get("backoff_s"), 0),
                          _num(r.get("kill_to_ready_s"), 1), _num(r.get("overhead_s"), 1)]
                         for r in sup.get("restarts", [])])
    return lines


def render_fleet(results: Path, load: Any) -> list[str]:
    """The fleet's sections (none when fleet.json is absent)."""
    data = load(results, SOURCE)
    if data is None:
        return []
    lines: list[str] = []
    if data.get("capacity"):
        lines += render_capacity(data["capacity"])
    if data.get("master_scale"):
        lines += render_master_scale(data["master_scale"])
    return lines + render_operations(data)
