"""ScienceBoard's GRASS GIS tasks on Debian's GRASS 8.2 in a local slot, set up from their task
files (stand-in data sets, the GUI launched with the project's state reader inside it) and
judged by their own checkers read from the running GUI. For each task a scripted wrong
solution fails, then a right one (done on top of it, in the same GUI) succeeds. Solutions are
keys and clicks sent through the guest agent at the places the GUI reports for its widgets
(the Layer Manager's tabs, the console's prompt, the layer tree's items, the map window).

One GRASS GUI per task (its setup launches it); the slot's reset closes it and restores the
data sets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coda.actions import Click, Hotkey, Press, RightClick, TypeText
from coda.contracts.desktop import CheckOutcome, CheckStatus, EpisodeEnd, Verdict
from coda.tasks import load_task_file
from tests.fixtures.waiting import wait_for
from worker.providers.image import grassdata
from worker.providers.local import LocalDesktop
from worker.tasks import TaskContext, run_checkers, run_setup
from worker.tasks.adapters.grass import gui

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "GrassGIS"
WAIT_S = 60.0

Solution = Callable[[LocalDesktop, TaskContext], EpisodeEnd]


@pytest.fixture(scope="module", autouse=True)
def _data_built(desktop_host: None) -> None:
    if not grassdata.is_built(grassdata.default_dest()):
        pytest.fail("GRASS GIS's stand-in data sets are not built: run scripts/desktop-deps.sh")


def act(desktop: LocalDesktop, *actions: Any) -> None:
    for action in actions:
        result = desktop.act(action)
        assert result.ok, result.error


def click(rect: list[int], kind: type[Click] | type[RightClick] = Click) -> Any:
    x, y, w, h = rect
    return kind(x=x + w // 2, y=y + h // 2)


def show_tab(desktop: LocalDesktop, ctx: TaskContext, label: str) -> dict[str, Any]:
    x, y = gui.call(ctx, "rects")["tabs"][label]
    act(desktop, Click(x=x, y=y))
    return wait_for(lambda: (r := gui.call(ctx, "rects"))["page"] == label and r,
                    f"the {label} tab", WAIT_S)


def progress(ctx: TaskContext, command: str) -> Callable[[], bool]:
    """Whether ``command`` has run: a display command (``d.*``) adds a layer to the layer tree,
    any other one ends with "finished" in the console's output."""
    before = gui.dump(ctx)
    if command.startswith("d."):
        count = len(before["layers"])
        return lambda: len(gui.dump(ctx)["layers"]) > count
    count = before["output"].count("finished")
    return lambda: gui.dump(ctx)["output"].count("finished") > count


def console(*commands: str) -> Solution:
    """Type each command into the Layer Manager's console and run it; done when the console
    reports each one finished."""
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        rects = show_tab(desktop, ctx, "Console")
        act(desktop, click(rects["prompt"]))
        for command in commands:
            done = progress(ctx, command)
            act(desktop, TypeText(text=command), Press(key="escape"), Press(key="enter"))
            wait_for(done, f"{command!r} to finish in the console", WAIT_S)
        return EpisodeEnd(kind="DONE")
    return solve


def rename_layer(name: str) -> Solution:
    """The layer tree: right-click the first layer, Rename, type the name, Enter."""
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        rects = show_tab(desktop, ctx, "Layers")
        item = rects["layer_items"][0]
        act(desktop, click(item["rect"]), click(item["rect"], RightClick))
        act(desktop, Press(key="down"), Press(key="down"), Press(key="enter"))
        act(desktop, Hotkey(keys=["ctrl", "a"]), TypeText(text=name), Press(key="enter"))
        wait_for(lambda: any(w["_text"] == name for w in gui.dump(ctx)["windows"]),
                 f"the layer named {name!r}", WAIT_S)
        return EpisodeEnd(kind="DONE")
    return solve


def map_menu(presses: int) -> Solution:
    """The map window's context menu (Copy coordinates, Hide toolbars, Hide statusbar): the
    ``presses``-th item; done when the menu is gone (a state read answers again)."""
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        act(desktop, click(gui.call(ctx, "rects")["map_window"], RightClick))
        act(desktop, *[Press(key="down")] * presses, Press(key="enter"))
        wait_for(lambda: gui.dump(ctx), "the GUI after its context menu", WAIT_S)
        return EpisodeEnd(kind="DONE")
    return solve


def answer(text: str) -> Solution:
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        return EpisodeEnd(kind="ANS", answer=text)
    return solve


def scale(value: float) -> Solution:
    """The map display's scale set as the task's own ``scale`` step sets it."""
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        gui.call(ctx, "scale", scale=value)
        return EpisodeEnd(kind="DONE")
    return solve


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


def _setup(desktop: LocalDesktop, name: str) -> TaskContext:
    task = load_task_file(TASKS / f"{name}.json")
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    return ctx


def _judge(ctx: TaskContext, end: EpisodeEnd) -> CheckOutcome:
    return run_checkers(ctx, end)


@pytest.mark.parametrize("name", sorted(CASES))
def test_grass_task_wrong_then_right_on_the_real_grass(desktop: LocalDesktop, name: str) -> None:
    families, wrong, right = CASES[name]
    ctx = _setup(desktop, name)
    outcome = _judge(ctx, wrong(desktop, ctx))
    assert outcome.verdict is Verdict.FAILURE, outcome
    assert any(r.status is CheckStatus.FAIL for r in outcome.results)
    outcome = _judge(ctx, right(desktop, ctx))
    assert outcome.verdict is Verdict.SUCCESS, outcome
    assert sorted({r.type for r in outcome.results}) == sorted(families)


def test_a_reset_restores_the_data_sets(desktop: LocalDesktop) -> None:
    """D-02 deletes a column; after the slot's reset the next episode finds it again."""
    ctx = _setup(desktop, "D-02")
    console("v.db.dropcolumn map=boundary_region columns=ISTAT")(desktop, ctx)
    assert _judge(ctx, EpisodeEnd(kind="DONE")).verdict is Verdict.SUCCESS
    ctx = _setup(desktop, "D-02")
    assert _judge(ctx, EpisodeEnd(kind="DONE")).verdict is Verdict.FAILURE
