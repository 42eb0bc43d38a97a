"""Scripted solutions of GRASS GIS tasks on a real GUI: keys and clicks sent through the guest
agent at the places the GUI reports for its widgets (the Layer Manager's tabs, the console's
prompt, the layer tree's items, the map window), each done when the GUI's state shows it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.actions import Click, Hotkey, Press, RightClick, TypeText
from coda.contracts.desktop import EpisodeEnd
from coda.tasks import load_task_file
from tests.fixtures.waiting import wait_for
from worker.providers.base import Desktop
from worker.tasks import TaskContext, run_setup
from worker.tasks.adapters.grass import gui

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "GrassGIS"
WAIT_S = 60.0

Solution = Callable[[Desktop, TaskContext], EpisodeEnd]


def act(desktop: Desktop, *actions: Any) -> None:
    for action in actions:
        result = desktop.act(action)
        assert result.ok, result.error


def click(rect: list[int], kind: type[Click] | type[RightClick] = Click) -> Any:
    x, y, w, h = rect
    return kind(x=x + w // 2, y=y + h // 2)


def show_tab(desktop: Desktop, ctx: TaskContext, label: str) -> dict[str, Any]:
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
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
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
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
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
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        act(desktop, click(gui.call(ctx, "rects")["map_window"], RightClick))
        act(desktop, *[Press(key="down")] * presses, Press(key="enter"))
        wait_for(lambda: gui.dump(ctx), "the GUI after its context menu", WAIT_S)
        return EpisodeEnd(kind="DONE")
    return solve


def answer(text: str) -> Solution:
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        return EpisodeEnd(kind="ANS", answer=text)
    return solve


def scale(value: float) -> Solution:
    """The map display's scale set as the task's own ``scale`` step sets it."""
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        gui.call(ctx, "scale", scale=value)
        return EpisodeEnd(kind="DONE")
    return solve


def setup_task(desktop: Desktop, name: str) -> TaskContext:
    task = load_task_file(TASKS / f"{name}.json")
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    return ctx
