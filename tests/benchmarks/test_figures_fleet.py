"""The fleet's generated tables (benchmarks/figures_fleet.py): every run of fleet.json shown,
a run not named in the order after the named ones, an absent figure read as not measured."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.figures_doc import load
from benchmarks.figures_fleet import MISSING, render_fleet


def test_runs_are_shown_in_order_and_gaps_say_not_measured(tmp_path: Path) -> None:
    run = {"slots": 10000, "cadence": {"step_s": 10.0, "heartbeat_s": 10.0, "episode_s": 150.0,
                                       "step_window_s": 5.0},
           "master_processes": 1, "p99_ms": 37.47, "shed": 0}
    (tmp_path / "fleet.json").write_text(json.dumps({
        "master_scale": {"a_new_run": {**run, "master_settings": {
            "CODA_SHED_MAX_IN_FLIGHT": "0"}}, "slots_10000": run},
        "failover": {"runs": 1, "time_to_requeue_s": 9.3, "time_to_requeue_s_runs": [9.3]}}))
    page = "\n".join(render_fleet(tmp_path, load))
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ["slots_10000", "a_new_run"]
    assert "batched (5 s)" in rows[0] and "| on |" in rows[0] and "| off |" in rows[1]
    assert "| 37.47 |" in rows[0] and MISSING in rows[0]  # p50 was not recorded
    assert "| kill -> its episode queued again | 9.3 s | 9.3 |" in page


def test_no_fleet_json_no_sections(tmp_path: Path) -> None:
    assert render_fleet(tmp_path, load) == []
