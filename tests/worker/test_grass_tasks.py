"""ScienceBoard's GRASS GIS tasks on Debian's GRASS 8.2 in a local slot, set up from their task
files (stand-in data sets, the GUI launched with the project's state reader inside it) and
judged by their own checkers read from the running GUI. For each task a scripted wrong
solution fails, then a right one (done on top of it, in the same GUI) succeeds. Solutions are
keys and clicks sent through the guest agent at the places the GUI reports for its widgets
(the Layer Manager's tabs, the console's prompt, the layer tree's items, the map window).

One GRASS GUI per task (its setup launches it); the slot's reset closes it and restores the
data sets."""

from __future__ import annotations

import pytest

from coda.contracts.desktop import CheckStatus, EpisodeEnd, Verdict
from worker.providers.image import grassdata
from worker.providers.local import LocalDesktop
from worker.tasks import run_checkers

from .grass_helpers import (
    Solution,
    answer,
    console,
    map_menu,
    rename_layer,
    scale,
    setup_task,
)


@pytest.fixture(scope="module", autouse=True)
def _data_built(desktop_host: None) -> None:
    if not grassdata.is_built(grassdata.default_dest()):
        pytest.fail("GRASS GIS's stand-in data sets are not built: run scripts/desktop-deps.sh")


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
    # the map scale 1:400 (statusbar)
    "A-06": (["info"], scale(4000), scale(400)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grass_task_wrong_then_right_on_the_real_grass(desktop: LocalDesktop, name: str) -> None:
    families, wrong, right = CASES[name]
    ctx = setup_task(desktop, name)
    outcome = run_checkers(ctx, wrong(desktop, ctx))
    assert outcome.verdict is Verdict.FAILURE, outcome
    assert any(r.status is CheckStatus.FAIL for r in outcome.results)
    outcome = run_checkers(ctx, right(desktop, ctx))
    assert outcome.verdict is Verdict.SUCCESS, outcome
    assert sorted({r.type for r in outcome.results}) == sorted(families)


def test_a_reset_restores_the_data_sets(desktop: LocalDesktop) -> None:
    """D-02 deletes a column; after the slot's reset the next episode finds it again."""
    ctx = setup_task(desktop, "D-02")
    console("v.db.dropcolumn map=boundary_region columns=ISTAT")(desktop, ctx)
    assert run_checkers(ctx, EpisodeEnd(kind="DONE")).verdict is Verdict.SUCCESS
    ctx = setup_task(desktop, "D-02")
    assert run_checkers(ctx, EpisodeEnd(kind="DONE")).verdict is Verdict.FAILURE
