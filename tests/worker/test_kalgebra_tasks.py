"""ScienceBoard's KAlgebra tasks on Debian's KAlgebra in a local slot, judged by their own
checkers read from the real application (its accessibility tree, its console, ``calgebra``): for
checker types ``val``, ``var``, ``stop``, ``eqn`` (2D points, 2D resolution, 3D points, 3D style)
a scripted right solution succeeds and a scripted wrong one fails. Solutions type into KAlgebra's
console with keys sent through the guest agent, or use KAlgebra's own panels and menus through the
tree."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from coda.actions import DoubleClick, Hotkey, Press, TypeText
from coda.contracts.desktop import CheckOutcome, CheckStatus, CheckVerdict, EpisodeEnd
from coda.tasks import load_task_file
from tests.fixtures.waiting import wait_for
from tests.worker.helpers import act_until
from worker.providers.local import LocalDesktop
from worker.tasks import TaskContext, run_checkers, run_setup
from worker.tasks.adapters.kalgebra import desktop as kdesktop

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "KAlgebra"

Solution = Callable[[LocalDesktop, TaskContext], EpisodeEnd]


def console(*lines: str, variable: str, from_tab: bool = False) -> Solution:
    """Type each line into the calculator's console (it has the focus after launch; from
    another tab, Alt+C shows the Calculator tab and focuses it), then wait until ``variable``
    is in the Variables panel."""
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        if from_tab:
            assert desktop.act(Hotkey(keys=["alt", "c"])).ok
            wait_for(lambda: kdesktop.helper(ctx, "state")["tab"] == 0, "the Calculator tab")
        for line in lines:
            for action in (TypeText(text=line), Press(key="enter")):
                result = desktop.act(action)
                assert result.ok, result.error
        wait_for(lambda: variable in dict(kdesktop.helper(ctx, "state")["variables"]),
                   f"{variable} in KAlgebra's Variables panel")
        return EpisodeEnd(kind="DONE")
    return solve


def ui(*commands: tuple[str, ...]) -> Solution:
    """KAlgebra's own panels and menus, driven through its accessibility tree."""
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        for command in commands:
            kdesktop.helper(ctx, *command)
        return EpisodeEnd(kind="DONE")
    return solve


def editor_shown(ctx: TaskContext) -> bool:
    """Whether the Functions panel shows a function's editor."""
    return bool(kdesktop.helper(ctx, "editor")["editor"])


def focused(ctx: TaskContext, role: str, index: int | None = None) -> bool:
    """Whether the Functions panel's focus is on an accessible of ``role`` (at ``index`` among
    its siblings, where given; a list's cells keep a stale mark, never looked for)."""
    return any(f["role"] == role and index in (None, f["index"])
               for f in kdesktop.helper(ctx, "focus")["focus"])


def recolour(downs: int) -> Solution:
    """Give the 2D plot the colour ``downs`` rows below the colour box's first entry (Custom...;
    then white, three greys, black, ..., teal, navy, purple), as a user does: double-click the
    plot in the Functions list (its Editing page opens on the plot's expression), Tab to the
    colour box, open it, pick the colour, Shift+Tab back to the expression and Return (OK).
    Each input waits until KAlgebra shows what it did (the focus where it moved it), and is
    done again while KAlgebra still shows the state before it: on a busy machine the Editing
    page opens late, and its expression editor takes the first Tab for itself."""
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        row = kdesktop.helper(ctx, "colours")["rows"][0]["plot_box"]

        def on_text() -> bool:
            return focused(ctx, "text")

        def on_box() -> bool:
            return focused(ctx, "combo box")

        act_until(desktop, DoubleClick(x=row[0] + row[2] // 2, y=row[1] + row[3] // 2),
                  lambda: editor_shown(ctx) and on_text(), "the plot's Editing page",
                  unmoved=lambda: not editor_shown(ctx))
        act_until(desktop, Press(key="tab"), on_box, "the focus on the colour box",
                  unmoved=on_text)
        act_until(desktop, Hotkey(keys=["alt", "down"]), lambda: focused(ctx, "list item"),
                  "the colour box's list open", unmoved=on_box)
        for action in (Press(key="home"), *[Press(key="down")] * downs):
            result = desktop.act(action)
            assert result.ok, result.error
        wait_for(lambda: focused(ctx, "list item", downs), f"the colour {downs} rows down")
        act_until(desktop, Press(key="enter"), on_box, "the colour picked, its list closed",
                  unmoved=lambda: focused(ctx, "list item", downs))
        act_until(desktop, Hotkey(keys=["shift", "tab"]), on_text,
                  "the focus back on the expression", unmoved=on_box)
        act_until(desktop, Press(key="enter"), lambda: not editor_shown(ctx),
                  "the plot accepted (its Editing page closed)", unmoved=on_text)
        return EpisodeEnd(kind="DONE")
    return solve


def answer(text: str) -> Solution:
    def solve(desktop: LocalDesktop, ctx: TaskContext) -> EpisodeEnd:
        return EpisodeEnd(kind="ANS", answer=text)
    return solve


# task: (checker types, right solution, wrong solution)
CASES: dict[str, tuple[list[str], Solution, Solution]] = {
    # the conjugate of 1+i into p (1+-i); the wrong one has the same real part, all the
    # Variables panel shows of a number
    "A-01": (["var"], console("p:=conjugate(1+i)", variable="p"),
             console("p:=1+i", variable="p")),
    # log_2(3) into p
    "C-01": (["val"], console("p:=log(3)/log(2)", variable="p"),
             console("p:=log(2)/log(3)", variable="p")),
    # the area of the ellipse the setup plots (func_2d), into area
    "D-02": (["val"], console("area:=pi*3*4", variable="area", from_tab=True),
             console("area:=pi*3*3", variable="area", from_tab=True)),
    # Fibonacci f(24), answered
    "C-03": (["stop"], answer("46368"), answer("46367")),
    # plot x^2 in the 2D tab
    "B-01": (["eqn"], ui(("tab", "1"), ("add2d", "x->x^2")),
             ui(("tab", "1"), ("add2d", "x->x^3"))),
    # the given curve (setup) in pure black; the wrong one navy
    "B-04": (["eqn"], recolour(5), recolour(25)),
    # the given curve (setup) in Very Fine resolution
    "B-05": (["eqn"], ui(("menu", "2D Graph", "Very Fine")), ui(("menu", "2D Graph", "Fine"))),
    # a sphere of diameter 2*sqrt(2) in the 3D tab
    "C-14": (["eqn"], ui(("add3d", "x^2+y^2+z^2=8")), ui(("add3d", "x^2+y^2+z^2=4"))),
    # the given surface (setup, func_3d) drawn with lines
    "B-06": (["eqn"], ui(("menu", "3D Graph", "Lines")), ui(("menu", "3D Graph", "Dots"))),
}


def _run(desktop: LocalDesktop, name: str, solution: Solution) -> CheckOutcome:
    task = load_task_file(TASKS / f"{name}.json")
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    end = solution(desktop, ctx)
    return run_checkers(ctx, end)


@pytest.mark.parametrize("name", sorted(CASES))
def test_kalgebra_task_solved_on_the_real_kalgebra(desktop: LocalDesktop, name: str) -> None:
    types, right, _ = CASES[name]
    outcome = _run(desktop, name, right)
    assert outcome.verdict is CheckVerdict.SUCCESS, outcome
    assert [r.type for r in outcome.results] == types


@pytest.mark.parametrize("name", sorted(CASES))
def test_kalgebra_task_with_a_wrong_solution_fails(desktop: LocalDesktop, name: str) -> None:
    _, _, wrong = CASES[name]
    outcome = _run(desktop, name, wrong)
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    assert any(r.status is CheckStatus.FAIL for r in outcome.results)


# (task, what is typed, the Variables panel's text, verdict): Debian's KAlgebra keeps a value
# exact where it can, so its panel shows these as expressions (their numbers to 12 significant
# digits), not numbers
EXPRESSIONS = [
    # C-01's val (p = log_2(3) = 1.58496250072): Analitza calculates the shown expression
    ("C-01", "p:=-sqrt(3)+3.31701330829003", "-sqrt(3)+3.31701330829", CheckVerdict.SUCCESS),
    ("C-01", "p:=-sqrt(2)+3.31701330829003", "-sqrt(2)+3.31701330829", CheckVerdict.FAILURE),
    # A-01's var (p = 1+-i, Analitza's text of 1-i)
    ("A-01", "p:=sqrt(1)-i", "sqrt(1)-i", CheckVerdict.SUCCESS),
    ("A-01", "p:=sqrt(1)+i", "sqrt(1)+i", CheckVerdict.FAILURE),
]


@pytest.mark.parametrize(("name", "typed", "shown", "verdict"), EXPRESSIONS)
def test_a_value_the_panel_shows_as_an_expression_is_calculated(
        desktop: LocalDesktop, name: str, typed: str, shown: str, verdict: CheckVerdict) -> None:
    """Typed into the real KAlgebra's console, the value stays exact and the Variables panel
    shows an expression; the checker compares the value Analitza (``calgebra`` in the slot)
    calculates from it, as the application's value is meant: right passes, wrong fails."""
    task = load_task_file(TASKS / f"{name}.json")
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    assert run_setup(ctx).ok
    end = console(typed, variable="p")(desktop, ctx)
    assert kdesktop.variables(ctx)["p"] == shown  # an expression, not a number
    outcome = run_checkers(ctx, end)
    assert outcome.verdict is verdict, outcome
