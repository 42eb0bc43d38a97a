"""The opt-in corrected GRASS GIS checkers (worker/tasks/adapters/grass/errata.py): each erratum
names a defective item of its task file, and the verdicts of both modes on dumps shaped as the
state reader writes them (a layer added from the console: its options in its ``cmd``, no
properties-dialog options on its tree item)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from coda.contracts.desktop import CheckStatus
from coda.tasks import load_task_file
from worker.settings import WorkerSettings
from worker.tasks.adapters.grass import errata
from worker.tasks.adapters.grass.checkers import DUMP_KEY, check_info
from worker.tasks.context import TaskContext

from .test_grass_checkers import TASKS, item, layer


def console_layer(name: str, **options: str) -> dict[str, Any]:
    """The dump of a map with one layer added from the console (``d.vect map=name ...``)."""
    full = f"{name}@PERMANENT"
    return {"layers": [layer(full, cmd=["d.vect", {"map": full, **options}])],
            "windows": [{"name": full, "_data": [{"type": "vector"}, None]}]}


def dialog_layer(name: str, **options: str) -> dict[str, Any]:
    """The same layer once its properties dialog was applied (its options in both places)."""
    dump = console_layer(name, **options)
    params = [{"name": k, "value": v} for k, v in options.items()]
    dump["windows"][0]["_data"][1] = {"params": params}
    return dump


def check(task: str, dump: dict[str, Any], *, on: bool) -> Any:
    spec = load_task_file(TASKS / f"{task}.json")
    ctx = TaskContext(task=spec, guest=cast(Any, None), errata=on)  # the dump is read already
    ctx.scratch[DUMP_KEY] = dump
    return check_info(ctx, item(task))


def test_every_erratum_names_an_item_of_its_task_file() -> None:
    assert [e.task for e in errata.ERRATA] == [f"B-0{n}" for n in range(3, 10)]
    for erratum in errata.ERRATA:
        assert errata.for_item(item(erratum.task)) is erratum
        assert erratum.wrong and erratum.evidence and erratum.corrected


def test_the_setting_is_off_by_default() -> None:
    assert WorkerSettings().checker_errata is False


RIGHT = {"B-03": ("boundary_region", {"display": "shape,cat,topo"}),
         "B-04": ("boundary_region", {"fill_color": "191:191:191"}),
         "B-05": ("roadsmajor", {"color": "white"}),
         "B-06": ("railroads", {"width": "2"}),
         "B-07": ("firestations", {"icon": "basic/marker"}),
         "B-08": ("hospitals", {"size": "10"}),
         "B-09": ("schools", {"where": "wheelchair = 'yes'"})}


@pytest.mark.parametrize("task", sorted(RIGHT))
def test_a_layer_added_from_the_console_fails_scienceboard_and_passes_the_erratum(
        task: str) -> None:
    name, options = RIGHT[task]
    default = check(task, console_layer(name, **options), on=False)
    assert default.status is CheckStatus.FAIL
    assert default.detail.startswith("TypeError in the check")
    corrected = check(task, console_layer(name, **options), on=True)
    assert corrected.status is CheckStatus.PASS, corrected.detail
    assert corrected.detail.startswith(f"erratum {task} applied")
    assert "ScienceBoard's check: fail (TypeError in the check" in corrected.detail


@pytest.mark.parametrize("task", sorted(RIGHT))
def test_a_layer_left_at_the_defaults_fails_both(task: str) -> None:
    name, _ = RIGHT[task]
    assert check(task, console_layer(name), on=True).status is CheckStatus.FAIL
    assert check(task, {"layers": [], "windows": []}, on=True).status is CheckStatus.FAIL


def test_b09_a_where_clause_that_selects_another_value_too_passes_only_scienceboard() -> None:
    dump = dialog_layer("schools", where="wheelchair = 'yes' OR wheelchair = 'limited'")
    assert check("B-09", dump, on=False).status is CheckStatus.PASS
    corrected = check("B-09", dump, on=True)
    assert corrected.status is CheckStatus.FAIL
    assert "ScienceBoard's check: pass" in corrected.detail


def test_b09_a_clause_lost_from_the_dialog_but_kept_in_the_layer_cmd_passes_the_erratum() -> None:
    dump = dialog_layer("schools", where="wheelchair = 'yes'")
    dump["windows"][0]["_data"][1]["params"][0]["value"] = ""  # typed before the dialog was ready
    assert check("B-09", dump, on=False).status is CheckStatus.FAIL
    assert check("B-09", dump, on=True).status is CheckStatus.PASS


def test_b09_every_schools_layer_must_mark_only_the_accessible_ones() -> None:
    dump = console_layer("schools", where="wheelchair='yes'")
    dump["layers"].append(console_layer("schools")["layers"][0])
    assert check("B-09", dump, on=True).status is CheckStatus.FAIL


def test_with_the_dialog_applied_both_modes_agree() -> None:
    for task, (name, options) in RIGHT.items():
        if task == "B-05":  # ScienceBoard wants the dialog's 255:255:255:255
            options = {"color": "255:255:255:255"}
        if task == "B-04":
            options = {"fill_color": "191:191:191:255"}
        dump = dialog_layer(name, **options)
        assert check(task, dump, on=False).status is CheckStatus.PASS, task
        assert check(task, dump, on=True).status is CheckStatus.PASS, task


def test_items_without_an_erratum_keep_scienceboard_s_check() -> None:
    result = check("A-06", {"statusbar": {"scale": 400.0}}, on=True)
    assert (result.status, result.detail) == (CheckStatus.PASS, "key = 400.0 against 400")


@pytest.mark.parametrize(("text", "want"), [
    ("191:191:191", (191, 191, 191, 255)), ("191:191:191:255", (191, 191, 191, 255)),
    ("White", (255, 255, 255, 255)), ("1:2", None), ("a:b:c", None)])
def test_colours_as_grass_writes_them(text: str, want: Any) -> None:
    assert errata.rgba(text) == want


@pytest.mark.parametrize(("clause", "ok"), [
    ("wheelchair = 'yes'", True), ("wheelchair='yes'", True), ('"wheelchair" == \'yes\'', True),
    ("(wheelchair = 'yes')", True), ("wheelchair = 'yes' OR wheelchair = 'limited'", False),
    ("wheelchair = 'no'", False), ("wheelchair != 'yes'", False), ("", False)])
def test_b09_accepts_only_the_instruction_s_value(clause: str, ok: bool) -> None:
    assert errata.where_is_wheelchair_yes(clause) is ok
