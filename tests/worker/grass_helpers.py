"""Scripted solutions of GRASS GIS tasks on a real GUI: keys and clicks sent through the guest
agent at the places the GUI reports for its widgets (the Layer Manager's tabs, the console's
prompt, the layer tree's items, the map window), each done when the GUI's state shows it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from coda.actions import Click, Hotkey, Press, RightClick, TypeText
from coda.contracts.desktop import EpisodeEnd, GrassOp, SetupReport
from coda.tasks import load_task_file
from tests.fixtures.waiting import wait_for
from tests.worker.helpers import Solution, open_context_menu
from worker.providers.base import Desktop
from worker.tasks import TaskContext, run_setup
from worker.tasks.adapters.grass import gui

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "GrassGIS"
WAIT_S = 60.0



def act(desktop: Desktop, *actions: Any) -> None:
    for action in actions:
        result = desktop.act(action)
        assert result.ok, result.error


def click(rect: list[int], kind: type[Click] | type[RightClick] = Click) -> Any:
    x, y, w, h = rect
    return kind(x=x + w // 2, y=y + h // 2)


def show_tab(desktop: Desktop, ctx: TaskContext, label: str) -> dict[str, Any]:
    """Click the Layer Manager's tab ``label`` (GRASS marks a tab with new output as
    "Console (...)"); the widgets' places once it is shown."""
    tabs = gui.call(ctx, GrassOp.RECTS)["tabs"]
    x, y = next(point for text, point in tabs.items() if text.startswith(label))
    act(desktop, Click(x=x, y=y))
    return wait_for(lambda: (r := gui.call(ctx, GrassOp.RECTS))["page"].startswith(label) and r,
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
        act(desktop, click(rects["layer_items"][0]["rect"]))
        menu_item(desktop, ctx, lambda: click(  # where the item is now: the tree may relayout
            gui.call(ctx, GrassOp.RECTS)["layer_items"][0]["rect"], RightClick), 2)
        act(desktop, Hotkey(keys=["ctrl", "a"]), TypeText(text=name), Press(key="enter"))
        wait_for(lambda: any(w["_text"] == name for w in gui.dump(ctx)["windows"]),
                 f"the layer named {name!r}", WAIT_S)
        return EpisodeEnd(kind="DONE")
    return solve


def menu_item(desktop: Desktop, ctx: TaskContext, at: Callable[[], RightClick],
              presses: int) -> None:
    """Right-click at ``at()``, and once the context menu is up (the GUI reports it), choose
    its ``presses``-th item with the keyboard; done when the menu is gone."""
    open_context_menu(desktop, at, "the context menu", WAIT_S,
                      up=lambda: bool(gui.call(ctx, GrassOp.RECTS)["menu_open"]))
    act(desktop, *[Press(key="down")] * presses, Press(key="enter"))
    wait_for(lambda: not gui.call(ctx, GrassOp.RECTS)["menu_open"], "the context menu closed",
             WAIT_S)


def map_menu(presses: int) -> Solution:
    """The map window's context menu (Copy coordinates, Hide toolbars, Hide statusbar): the
    ``presses``-th item."""
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        menu_item(desktop, ctx, lambda: click(gui.call(ctx, GrassOp.RECTS)["map_window"],
                                              RightClick), presses)
        return EpisodeEnd(kind="DONE")
    return solve


def answer(text: str) -> Solution:
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        return EpisodeEnd(kind="ANS", answer=text)
    return solve


STATUSBAR_MODES = ("Coordinates", "Display extent", "Computational region", "Display geometry",
                   "Map scale", "Go to XY coordinates")  # the statusbar's context menu


def statusbar(mode: str, text: str, done: Callable[[dict[str, Any]], bool]) -> Solution:
    """The map display's statusbar: unless it shows ``mode`` already, right-click it and choose
    ``mode`` in its context menu (the menu raises the Layer Manager over the statusbar's left
    end), click the statusbar's free right part (raising the display again), then click the
    mode's widget (both again until it has the keyboard focus), select all, type ``text`` and
    Enter; done when ``done(dump)`` holds and the map is rendered (a display region beyond the
    poles fails the render, which raises the Layer Manager over the statusbar again)."""
    index = STATUSBAR_MODES.index(mode)

    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        x, y, w, h = gui.call(ctx, GrassOp.RECTS)["statusbar"]
        free = Click(x=x + w * 3 // 4, y=y + h // 2)
        if gui.dump(ctx)["statusbar"]["mode"] != index:
            menu_item(desktop, ctx, lambda: RightClick(x=free.x, y=free.y), index + 1)
            wait_for(lambda: gui.dump(ctx)["statusbar"]["mode"] == index,
                     f"the statusbar in mode {mode!r}", WAIT_S)

        def focused() -> bool:
            act(desktop, free)
            act(desktop, click(gui.call(ctx, GrassOp.RECTS)["statusbar_widget"]))
            return bool(gui.call(ctx, GrassOp.RECTS)["statusbar_focused"])

        wait_for(focused, f"the keyboard focus in the statusbar's {mode!r}", WAIT_S)
        act(desktop, Hotkey(keys=["ctrl", "a"]), TypeText(text=text), Press(key="enter"))
        wait_for(lambda: done(gui.dump(ctx)) and not gui.call(ctx, GrassOp.RECTS)["rendering"],
                 f"{text!r} entered in the statusbar and the map rendered", WAIT_S)
        return EpisodeEnd(kind="DONE")
    return solve


def setup_task_report(desktop: Desktop, name: str, *, reset: bool = True
                      ) -> tuple[TaskContext, SetupReport]:
    """Task ``name`` set up from its file; with ``reset`` on a freshly reset slot (the GUI
    closed, the data sets restored), else on the GUI an earlier task left (the task's
    ``launch`` restarts it: one GUI for several tasks)."""
    task = load_task_file(TASKS / f"{name}.json")
    if reset:
        desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    return ctx, run_setup(ctx)


def setup_task(desktop: Desktop, name: str, *, reset: bool = True) -> TaskContext:
    ctx, report = setup_task_report(desktop, name, reset=reset)
    assert report.ok, report.first_problem
    return ctx
