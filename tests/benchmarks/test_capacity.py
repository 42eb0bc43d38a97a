"""benchmarks/capacity.py's pure parts: its arguments, the run order and the summary (spread per
configuration, container/local ratio per slot count). The runs themselves are the benchmark's."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.capacity import episode_phases, parse_args, schedule, slot_list, summarize


def test_arguments_default_to_the_issue_curve() -> None:
    args = parse_args([])
    assert args.slots == [1, 2, 4, 8]
    assert args.providers == ["docker", "local"]
    assert args.docker_options == {}


def test_arguments_keep_a_run_short() -> None:
    args = parse_args(["--slots", "4,1,4", "--repeats", "1", "--episodes-per-slot", "1",
                       "--providers", "local", "--docker-options", '{"reset": "recreate"}'])
    assert (args.slots, args.repeats, args.episodes_per_slot) == ([1, 4], 1, 1)
    assert args.providers == ["local"]
    assert args.docker_options == {"reset": "recreate"}


@pytest.mark.parametrize("argv", [["--slots", "0"], ["--slots", "a,b"], ["--slots", ""],
                                  ["--repeats", "0"], ["--providers", "vsphere"],
                                  ["--docker-options", "[1]"], ["--docker-options", "{"]])
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_slot_list() -> None:
    assert slot_list("8, 2,1") == [1, 2, 8]
    with pytest.raises(ValueError):
        slot_list("65")


def test_runs_interleave_and_flip_order_every_repeat() -> None:
    assert schedule([1, 2], 2) == [(0, 1, "docker"), (0, 1, "local"),
                                   (0, 2, "docker"), (0, 2, "local"),
                                   (1, 1, "local"), (1, 1, "docker"),
                                   (1, 2, "local"), (1, 2, "docker")]


def _run(provider: str, slots: int, repeat: int, epm: float) -> dict[str, Any]:
    return {"provider": provider, "slots": slots, "repeat": repeat, "episodes_per_min": epm,
            "episodes": 2 * slots, "episodes_completed": 2 * slots,
            "episodes_succeeded": 2 * slots, "cold_episodes_per_min": epm / 2,
            "step_parts_ms_median": {"observe": 1.0, "total": 400.0},
            "episode_s_median": 6.0, "reset_s_median": 1.0, "steps_s_median": 3.0,
            "other_s_median": 2.0, "cpu_cores_per_slot": 0.2, "mem_mib_per_slot": 300.0,
            "mem_mib_per_slot_peak": 320.0, "worker_rss_mib": 60.0}


def test_summary_gives_spread_and_ratio_per_slot_count() -> None:
    runs = [_run("docker", 1, 0, 9.0), _run("local", 1, 0, 10.0),
            _run("local", 1, 1, 12.0), _run("docker", 1, 1, 11.0),
            _run("docker", 4, 0, 20.0), _run("local", 4, 0, 30.0)]
    out = summarize(runs)
    one, four = out["curve"]
    assert one["slots"] == 1
    assert one["docker"]["episodes_per_min"] == {"median": 10.0, "min": 9.0, "max": 11.0,
                                                 "runs": [9.0, 11.0]}
    assert one["local"]["episodes"] == 4
    assert one["ratio"] == 0.91  # 10 / 11
    assert one["ratio_runs"] == [0.9, 0.92]
    assert (one["ratio_min"], one["ratio_max"]) == (0.75, 1.1)
    assert four["ratio"] == 0.67
    assert out["ratio_min_over_slots"] == 0.67
    assert out["ratio_holds"] is False


def test_summary_of_one_provider_has_no_ratio() -> None:
    out = summarize([_run("local", 2, 0, 10.0)])
    assert "ratio" not in out["curve"][0]
    assert out["ratio_holds"] is False


def test_episode_phases_split_reset_steps_and_the_rest() -> None:
    events: list[dict[str, Any]] = [
        {"event": "episode.start", "episode": "e1", "timestamp": "2026-01-01T00:00:00Z"},
        {"event": "desktop.reset", "seconds": 1.5},
        {"event": "episode.end", "episode": "e1", "timestamp": "2026-01-01T00:00:06Z"}]
    records = [{"id": "e1", "steps": [{"timings": {"total": 1000.0}},
                                      {"timings": {"total": 1500.0}}, {"timings": None}]}]
    assert episode_phases(events, records) == {"episode_s_median": 6.0, "reset_s_median": 1.5,
                                               "steps_s_median": 2.5, "other_s_median": 2.0}
