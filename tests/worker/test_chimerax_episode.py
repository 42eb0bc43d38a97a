"""A ChimeraX task solved end to end by a replayed episode through ``coda worker``: a real
master, the planner and executor services on the replay backend (the recorded outputs of
``examples/replays/chimerax-A-04.*.json``: ``style sphere`` and Enter, then ``color bychain``
and Enter, typed into ChimeraX's command line, which has the keyboard focus after launch;
DONE), the worker as a real process setting ScienceBoard's A-04 up on the project's build of
ChimeraX and judging it with the task's own checkers (states: the drawing's bounds; info:
the residues' colours). On a local slot only: the desktop image (coda-desktop) has no
ChimeraX yet, so the container half of Celestia's episode test is not possible here. Without
a ChimeraX build this skips (CI=true: it fails)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.master import EXAMPLES, MasterProcess

from .chimerax_helpers import require_build
from .test_episodes import replays_fixture, solve_replayed

pytestmark = pytest.mark.slow

A04 = json.loads((EXAMPLES / "VM" / "ChimeraX" / "A-04.json").read_text())
chimerax_replays = replays_fixture("chimerax-A-04", require_build)


def test_replay_solves_a_chimerax_task_on_a_local_slot(
        wmaster: MasterProcess, chimerax_replays: tuple[str, str], desktop_host: None,
        tmp_path: Path) -> None:
    ep = solve_replayed(wmaster, chimerax_replays, A04, tmp_path / "worker.log",
                        ["type", "type", "done"])
    assert [s["action"].get("text") for s in ep["steps"][:2]] == [
        "style sphere\n", "color bychain\n"], ep["steps"]
