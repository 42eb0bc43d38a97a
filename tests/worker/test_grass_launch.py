"""GRASS GIS's ``launch`` step before it starts anything: the start mapset its command names,
and the data sets it needs. Missing or stale stand-in data sets (built by another
``grassdata.py``; a local slot's reset then copies none) fail the step at once, naming the fix,
instead of a GUI waited on until the step's bound."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from coda.contracts.desktop import StepStatus
from worker.providers.image import SCIENCEBOARD_IMAGE, grassdata
from worker.providers.local import LocalDesktop
from worker.tasks.adapters.grass.steps import start_mapset

from .grass_helpers import setup_task_report

COMMAND = ('gnome-terminal -- /bin/bash -ic "FLASK_PORT=8000 grass --gui '
           '/home/user/grassdata/world_latlong_wgs84/PERMANENT"')


def test_the_start_mapset_is_read_from_the_launch_command() -> None:
    assert start_mapset(COMMAND) == {"grassdb": "/home/user/grassdata",
                                     "location": "world_latlong_wgs84", "mapset": "PERMANENT"}
    assert start_mapset("grass --gui") is None
    assert start_mapset("grass -c --gui /data/loc/") is None  # no mapset named
    assert start_mapset('xterm -e "grass --text /d/loc/PERMANENT/"')["mapset"] == "PERMANENT"


def test_a_stale_data_cache_is_not_copied_into_a_slot(tmp_path: Path) -> None:
    cache = tmp_path / "grassdata"
    (cache / "world_latlong_wgs84" / "PERMANENT").mkdir(parents=True)
    (cache / grassdata.STAMP).write_text("built-by-an-older-grassdata.py\n")
    image = replace(SCIENCEBOARD_IMAGE, grassdata=cache)
    image.populate(tmp_path / "home")
    assert not (tmp_path / "home" / "grassdata").exists()
    (cache / grassdata.STAMP).write_text(grassdata.source_hash() + "\n")
    image.populate(tmp_path / "home")
    assert (tmp_path / "home" / "grassdata" / "world_latlong_wgs84" / "PERMANENT").is_dir()


@pytest.mark.parametrize("broken", ["missing", "stale"])
def test_missing_or_stale_data_fails_the_launch_at_once(desktop: LocalDesktop,
                                                         broken: str) -> None:
    desktop.reset()
    data = desktop.home / "grassdata"
    if broken == "missing":  # what a slot gets from a stale cache: nothing
        shutil.rmtree(data, ignore_errors=True)
    else:  # a desktop image built by another grassdata.py
        data.mkdir(exist_ok=True)
        (data / "world_latlong_wgs84" / "PERMANENT").mkdir(parents=True, exist_ok=True)
        (data / grassdata.STAMP).write_text("built-by-an-older-grassdata.py\n")
    _, report = setup_task_report(desktop, "A-01", reset=False)
    problem = report.first_problem
    assert problem is not None and problem.func == "launch", report
    assert problem.status is StepStatus.UNAVAILABLE
    assert broken in problem.detail and "scripts/desktop-deps.sh" in problem.detail
    assert not desktop.guest.windows(), "nothing was launched"  # type: ignore[union-attr]
