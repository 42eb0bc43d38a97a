"""Probes for the desktop tests (awaited with :func:`tests.fixtures.waiting.wait_for`)."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from PIL import Image

from coda.actions import Action, RightClick
from coda.contracts.desktop import CheckStatus, CheckVerdict, EpisodeEnd, WindowInfo
from tests.fixtures.waiting import wait_for
from worker.providers.base import Desktop
from worker.providers.client import GuestClient
from worker.tasks import TaskContext, run_checkers

Solution = Callable[[Desktop, TaskContext], EpisodeEnd]
"""A scripted solution of a task: GUI actions on the desktop, done when its effect shows."""


def then(*solutions: Solution) -> Solution:
    """The solutions one after the other; the episode ends as the last one ends it."""
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        end = EpisodeEnd(kind="DONE")
        for solution in solutions:
            end = solution(desktop, ctx)
        return end
    return solve


def window(guest: GuestClient | None, needle: str) -> WindowInfo | None:
    """The first window whose title or class contains ``needle`` (case-insensitive)."""
    n = needle.lower()
    for w in (guest.windows() if guest is not None else None) or []:
        if n in w.title.lower() or any(n in c.lower() for c in w.wm_class):
            return w
    return None


def read_json(guest: GuestClient, path: str) -> Any:
    data = guest.read_file(path)
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:  # half written
        return None


def pixel(png: bytes, x: int, y: int) -> tuple[int, int, int]:
    img = Image.open(io.BytesIO(png)).convert("RGB")
    r, g, b = img.getpixel((x, y))  # type: ignore[misc]
    return int(r), int(g), int(b)


def region(png: bytes, box: tuple[int, int, int, int]) -> bytes:
    return Image.open(io.BytesIO(png)).convert("RGB").crop(box).tobytes()


def wrong_fails_then_right_passes(desktop: Desktop, ctx: TaskContext, families: Sequence[str],
                                  wrong: Solution, right: Solution) -> None:
    """The task's own checkers fail its near miss, then (done on top, in the same application)
    pass its right solution, judging with the checker families listed."""
    outcome = run_checkers(ctx, wrong(desktop, ctx))
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    assert any(r.status is CheckStatus.FAIL for r in outcome.results)
    outcome = run_checkers(ctx, right(desktop, ctx))
    assert outcome.verdict is CheckVerdict.SUCCESS, outcome
    assert sorted({r.type for r in outcome.results}) == sorted(set(families))


RECLICK_S = 5.0
"""No context menu this long after a right-click: it is sent again."""


def act_until(desktop: Desktop, action: Action, done: Callable[[], bool], what: str,
              timeout: float = 60.0, *, unmoved: Callable[[], bool]) -> None:
    """Do ``action`` and wait until ``done()``; while the application still shows the state
    it was in before (``unmoved()``) :data:`RECLICK_S` after a try, do it again: a busy GUI
    can drop an input (a key that a widget still opening takes for itself), and doing it again
    from the same state is what a person does. Never repeated once the state moved on."""
    sent: list[float] = []

    def moved() -> bool:
        if sent and done():
            return True
        if not sent or (time.monotonic() - sent[-1] > RECLICK_S and unmoved()):
            result = desktop.act(action)
            assert result.ok, result.error
            sent.append(time.monotonic())
        return False

    wait_for(moved, what, timeout, logs=lambda: f"{action} done {len(sent)} times")


def open_context_menu(desktop: Desktop, at: Callable[[], RightClick], what: str,
                      timeout: float, *, up: Callable[[], bool] | None = None) -> None:
    """Right-click where ``at()`` says and wait until the context menu is up (``up()``; by
    default, the guest lists a popup on screen), as a person waits to see it before typing
    into it: keys typed before it maps go to the window below. A busy GUI (a render under way
    on a loaded machine) can drop the right-click, and a layout still settling can move the
    place: while no menu is up, the right-click is sent again every :data:`RECLICK_S` at the
    place ``at()`` says then. A failure names the places clicked and the popups seen."""
    guest = desktop.guest
    assert guest is not None
    is_up = up if up is not None else lambda: bool(guest.popups())
    sent: list[tuple[float, RightClick]] = []

    def menu_up() -> bool:
        if sent and is_up():
            return True
        if not sent or time.monotonic() - sent[-1][0] > RECLICK_S:
            click = at()
            result = desktop.act(click)
            assert result.ok, result.error
            sent.append((time.monotonic(), click))
        return False

    def seen() -> str:
        clicks = ", ".join(f"({c.x}, {c.y})" for _, c in sent)
        return f"right-clicks at {clicks}; popups on screen: {guest.popups()}"

    wait_for(menu_up, what, timeout, logs=seen)
