"""ScienceBoard's GRASS GIS tasks on Debian's GRASS 8.2 in a local slot, set up from their task
files (stand-in data sets, the GUI launched with the project's state reader inside it) and
judged by their own checkers read from the running GUI. For each task a scripted wrong
solution fails, then a right one (done on top of it, in the same GUI) succeeds. Solutions are
keys and clicks sent through the guest agent at the places the GUI reports for its widgets
(the Layer Manager's tabs, the console's prompt, the layer tree's items, the map window, the
map display's statusbar).

One GRASS GUI serves the module's tasks: each task's own setup restarts it (its ``launch``
step finds the GUI up and brings it back to a fresh launch's state). Only the slot's reset
restores the data sets (the last test shows it does), so no two tasks here change the same
map: D-01 adds a column to Piemonte's ``boundary_region``, D-04 deletes a point of
``countries``, and no other task reads what they change."""

from __future__ import annotations

import pytest

from coda.contracts.desktop import CheckVerdict, EpisodeEnd
from worker.providers.image import grassdata
from worker.providers.local import LocalDesktop
from worker.tasks import run_checkers
from worker.tasks.adapters.grass import gui

from .grass_helpers import (
    answer,
    console,
    map_menu,
    rename_layer,
    setup_task,
    statusbar,
)
from .helpers import Solution, wrong_fails_then_right_passes


@pytest.fixture(scope="module", autouse=True)
def _data_built(desktop_host: None) -> None:
    if not grassdata.is_built(grassdata.default_dest()):
        pytest.fail("GRASS GIS's stand-in data sets are not built: run scripts/desktop-deps.sh")


def centre(east: float, north: float) -> Solution:
    """Go to a point through the statusbar's "Go to XY coordinates" (degrees, as 25E;20N)."""
    return statusbar("Go to XY coordinates", f"{east:g}E;{north:g}N",
                     lambda d: abs(d["region"]["center_easting"] - east) < 1e-6
                     and abs(d["region"]["center_northing"] - north) < 1e-6)


def map_scale(value: int) -> Solution:
    """Type the scale into the statusbar's "Map scale" box (as 1:400)."""
    return statusbar("Map scale", f"1:{value}",
                     lambda d: abs(d["statusbar"]["scale"] - value) < 0.1)


# task: (checker families, wrong solution, right solution)
CASES: dict[str, tuple[list[str], Solution, Solution]] = {
    # switch to natural_earth_dataset and load countries (layers)
    "A-01": (["info"], console("d.vect map=country_boundaries@PERMANENT"),
             console("g.mapset location=natural_earth_dataset mapset=PERMANENT",
                     "d.vect map=countries@PERMANENT")),
    # rename the layer (windows)
    "B-02": (["info"], rename_layer("country_boundary"), rename_layer("country_boundaries")),
    # hide the map display's toolbar (toolbars); wrong: hide its statusbar
    "A-03": (["info"], map_menu(3), map_menu(2)),
    # output the metadata of the current map (output)
    "B-11": (["info"], console("v.info map=roadsmajor@PERMANENT"),
             console("v.info map=boundary_region@PERMANENT")),
    # add a varchar column COLOR (db: v.db.select)
    "D-01": (["db"], console('v.db.addcolumn map=boundary_region columns="COLOUR varchar(8)"'),
             console('v.db.addcolumn map=boundary_region columns="COLOR varchar(8)"')),
    # delete the point in the Mediterranean Sea (db: v.to.db); wrong: a country's centroid
    "D-04": (["db"], console("v.edit map=countries tool=delete cats=1 type=centroid"),
             console("v.edit map=countries tool=delete cats=258")),
    # the number of Piemonte's provinces (answer)
    "A-10": (["stop"], answer("7"), answer("8")),
    # the map scale 1:400 (statusbar); wrong: 1:40
    "A-06": (["info"], map_scale(40), map_scale(400)),
    # the map display centred on 25°E, 20°N (region); wrong: 20°E, 0°N (a region beyond the
    # poles fails the render, after which GRASS 8.2 keeps the Layer Manager active: only the
    # right solution goes there, last)
    "A-07": (["info"], centre(20, 0), centre(25, 20)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grass_task_wrong_then_right_on_the_real_grass(desktop: LocalDesktop, name: str) -> None:
    families, wrong, right = CASES[name]
    ctx = setup_task(desktop, name, reset=False)
    wrong_fails_then_right_passes(desktop, ctx, families, wrong, right)


def test_the_scale_step_ends_with_its_render(desktop: LocalDesktop) -> None:
    """A-08's ``scale`` step: done only once the map display has rendered at 1:25 (GRASS
    renders from a timer after the call): right after setup nothing renders any more."""
    ctx = setup_task(desktop, "A-08", reset=False)
    state = gui.ready(ctx)
    assert state is not None and state["rendering"] is False
    assert abs(gui.dump(ctx)["statusbar"]["scale"] - 25) < 0.1


def test_errata_judge_a_layer_added_from_the_console_by_its_cmd(desktop: LocalDesktop) -> None:
    """B-06 done from the console (``d.vect ... width=2``): ScienceBoard's check reads the
    properties-dialog options GRASS leaves unset for such a layer and fails; with the errata on
    the corrected check reads the layer's cmd and passes."""
    ctx = setup_task(desktop, "B-06", reset=False)
    end = console("d.vect map=railroads@PERMANENT width=2")(desktop, ctx)
    outcome = run_checkers(ctx, end)
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    assert "TypeError in the check" in outcome.results[-1].detail
    ctx.errata = True
    outcome = run_checkers(ctx, end)
    assert outcome.verdict is CheckVerdict.SUCCESS, outcome
    assert outcome.results[-1].detail.startswith("erratum B-06 applied")


def test_a_reset_restores_the_data_sets(desktop: LocalDesktop) -> None:
    """D-02 deletes a column; after the slot's reset the next episode finds it again."""
    ctx = setup_task(desktop, "D-02", reset=False)
    console("v.db.dropcolumn map=boundary_region columns=ISTAT")(desktop, ctx)
    assert run_checkers(ctx, EpisodeEnd(kind="DONE")).verdict is CheckVerdict.SUCCESS
    ctx = setup_task(desktop, "D-02")
    assert run_checkers(ctx, EpisodeEnd(kind="DONE")).verdict is CheckVerdict.FAILURE
