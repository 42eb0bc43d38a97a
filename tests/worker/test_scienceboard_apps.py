"""Bundled ScienceBoard tasks on the real applications of the local slot image: two TeXstudio
tasks set up from their task files, solved (and botched) by scripted actions sent through the
agent and judged by their own checkers; KAlgebra tasks' setup starts the real KAlgebra and runs
its state steps through its own interface (solved tasks: ``test_kalgebra_tasks.py``); the
image's GRASS GIS GUI starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda.actions import Action, Hotkey, Press, TypeText
from coda.contracts.desktop import CheckOutcome, CheckStatus, CheckVerdict, EpisodeEnd
from coda.tasks import load_task_file
from tests.fixtures.waiting import wait_for
from worker.providers.local import LocalDesktop
from worker.tasks import TaskContext, run_checkers, run_setup

from .helpers import window

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM"


def find_and_type(search: str, *keys_then_text: Action) -> list[Action]:
    """TeXstudio: Ctrl+F selects the first match while typing, Escape returns to the editor
    with the match selected; then the edit; then Ctrl+S."""
    return [Hotkey(keys=["ctrl", "f"]), TypeText(text=search), Press(key="escape"),
            *keys_then_text, Hotkey(keys=["ctrl", "s"])]


# task, the right edit, a wrong edit
TEXSTUDIO_CASES = {
    # \cite{} -> \cite{de2015lean} (checkers: file, compile with bibtex)
    "B-01": (find_and_type("\\cite{}", Press(key="left"), TypeText(text="de2015lean")),
             find_and_type("\\cite{}", Press(key="left"), TypeText(text="de2015leam"))),
    # one letter of the lambda-cube rules (checkers: file, compile)
    "C-02": (find_and_type("x: M. B", TypeText(text="x: A. B")),
             find_and_type("x: M. B", TypeText(text="x: B. B"))),
}


def _run_texstudio_task(desktop: LocalDesktop, name: str, actions: list[Action]) -> CheckOutcome:
    task = load_task_file(TASKS / "TeXstudio" / f"{name}.json")
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    guest = ctx.guest
    wait_for(lambda: window(guest, "main.tex - TeXstudio"), "TeXstudio with main.tex loaded")
    main = ctx.rw("/home/user/atelier/main.tex")
    original = guest.read_file(main)
    for action in actions:
        result = desktop.act(action)
        assert result.ok, result.error
        assert desktop.settle(), f"the screen kept changing after {action}"
    wait_for(lambda: guest.read_file(main) != original, "TeXstudio to save main.tex")
    return run_checkers(ctx, EpisodeEnd(kind="DONE"))


@pytest.mark.parametrize("name", sorted(TEXSTUDIO_CASES))
def test_texstudio_task_solved_on_the_real_texstudio(desktop: LocalDesktop, name: str) -> None:
    outcome = _run_texstudio_task(desktop, name, TEXSTUDIO_CASES[name][0])
    assert outcome.verdict is CheckVerdict.SUCCESS, outcome
    assert [(r.type, r.status) for r in outcome.results] == [
        ("file", CheckStatus.PASS), ("compile", CheckStatus.PASS)]


@pytest.mark.parametrize("name", sorted(TEXSTUDIO_CASES))
def test_texstudio_task_with_a_wrong_edit_fails(desktop: LocalDesktop, name: str) -> None:
    outcome = _run_texstudio_task(desktop, name, TEXSTUDIO_CASES[name][1])
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    assert outcome.results[0].type == "file"
    assert outcome.results[0].status is CheckStatus.FAIL


def test_kalgebra_task_setup_starts_the_real_kalgebra(desktop: LocalDesktop) -> None:
    task = load_task_file(TASKS / "KAlgebra" / "A-01.json")
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    assert report.steps[0].func == "launch" and "KAlgebra" in report.steps[0].detail
    assert window(ctx.guest, "kalgebra") is not None
    # nothing done: p is not defined, read from KAlgebra's Variables panel
    outcome = run_checkers(ctx, EpisodeEnd(kind="DONE"))
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    assert outcome.results[0].status is CheckStatus.FAIL


def test_kalgebra_state_steps_run_through_its_own_interface(desktop: LocalDesktop) -> None:
    task = load_task_file(TASKS / "KAlgebra" / "B-03.json")
    funcs = [s.func for s in task.setup]
    assert funcs == ["launch", "tab", "func_2d"], funcs
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    # the trifolium is still plotted: "delete it" is not done
    outcome = run_checkers(ctx, EpisodeEnd(kind="DONE"))
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    assert "1 curves" in outcome.results[0].detail


def test_grass_gis_gui_starts_from_the_slot_image(desktop: LocalDesktop) -> None:
    desktop.reset()
    guest = desktop.guest
    assert guest is not None
    made = guest.execute("grass -c EPSG:4326 -e ~/grassdata/world", shell=True, timeout=120)
    assert made.returncode == 0, made.error
    guest.launch("grass --gui ~/grassdata/world/PERMANENT", shell=True)
    wait_for(lambda: window(guest, "GRASS GIS"), "the GRASS GIS main window", timeout=120)
