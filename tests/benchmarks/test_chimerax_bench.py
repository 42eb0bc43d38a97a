"""``benchmarks/chimerax.py``: its pure parts (idle CPU from samples, the idle goal, episodes
per minute, its arguments), and a smoke run of the real script on one local slot (one round of
each phase; checks the JSON it writes, never the timings). Without a ChimeraX build the smoke
run skips (CI=true: it fails)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chimerax import IDLE_GOAL, cpu_cores, goal, main, per_minute
from tests.benchmarks.running import run_benchmark
from tests.worker.chimerax_helpers import require_build


def test_idle_cores_are_cpu_time_over_wall_time_and_the_peak_the_busiest_interval() -> None:
    samples = [(0.0, {1: 10.0, 2: 5.0}), (1.0, {1: 10.1, 2: 5.0}), (2.0, {1: 10.2, 2: 5.5}),
               (4.0, {1: 10.2, 2: 5.5})]
    figures = cpu_cores(samples)
    assert figures == {"cores": 0.175, "peak_cores": 0.6, "seconds": 4.0}


def test_a_process_born_in_the_window_counts_whole_and_one_gone_keeps_what_was_seen() -> None:
    samples = [(0.0, {1: 3.0}), (1.0, {1: 3.5, 7: 0.25}), (2.0, {7: 0.5})]
    # pid 1: 0.5 until it went; pid 7, born after the first sample: all of its 0.5
    assert cpu_cores(samples)["cores"] == 0.5


def test_too_few_samples_measure_nothing() -> None:
    assert cpu_cores([]) == cpu_cores([(0.0, {1: 1.0})]) == {"cores": 0.0, "peak_cores": 0.0,
                                                             "seconds": 0.0}


def test_the_goal_is_judged_on_chimerax_s_worst_slot() -> None:
    met = goal([0.02, 0.1], [0.12, 0.2])
    assert met["goal"] == IDLE_GOAL and met["limit_cores"] == 0.15
    assert (met["met"], met["chimerax_cores_max"]) == (True, 0.1)
    assert (met["slot_met"], met["slot_cores_max"]) == (False, 0.2)
    assert goal([0.02, 0.151], [])["met"] is False
    assert goal([0.15], [])["met"] is True


def test_episodes_per_minute() -> None:
    assert per_minute(3, 90.0) == 2.0
    assert per_minute(0, 0.0) == 0.0


@pytest.mark.parametrize("argv", [["--episodes", "0"], ["--shots", "0"], ["--slots", "0"],
                                  ["--task", "Z-99"]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        main(argv)


@pytest.mark.slow
def test_chimerax_benchmark_writes_every_figure_on_one_slot(desktop_host: None,
                                                            tmp_path: Path) -> None:
    require_build()
    result = run_benchmark("chimerax", tmp_path / "chimerax.json", "--slots", "1", "--shots",
                           "1", "--idle-s", "2", "--settle-s", "0", "--episodes", "1",
                           timeout=600)
    assert result["container"] is None and result["container_reason"]
    assert set(result["idle_goal"]) >= {"goal", "met", "chimerax_cores_max"}
    one = result["slots"]["1"]
    for key in ("launch_ready_s", "setup_s", "reset_s", "screenshot_ms", "states_dump_ms"):
        assert one[key] > 0, key
    assert one["episodes"]["succeeded"] == one["episodes"]["completed"] == 1, one["episodes"]
    assert one["episodes"]["episodes_per_min"] > 0
    assert len(one["loadavg_before"]) == len(result["machine"]["loadavg_after"]) == 3
