"""GRASS GIS's ``info``/``db`` judgement on dumps shaped as the state reader writes them: the
verdict is ScienceBoard's, and the detail names what the task's predicate compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coda.contracts.desktop import CheckStatus
from worker.tasks.adapters.grass.checkers import judge

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "GrassGIS"
TEMP = "/tmp/grass8-user-4242/" + "x" * 200  # a layer's attributes start with temp paths


def item(task: str, index: int = 0) -> dict[str, Any]:
    items = [i for i in json.loads((TASKS / f"{task}.json").read_text())["evaluate"]
             if i["type"] != "stop"]
    return dict(items[index])


def layer(name: str, **extra: Any) -> dict[str, Any]:
    return {"mapfile": TEMP + ".ppm", "maskfile": TEMP + ".pgm", "name": name, **extra}


def test_the_detail_names_the_fields_the_predicate_read_not_a_temp_path() -> None:
    dump = {"layers": [layer("country_boundaries@PERMANENT"), layer("countries@PERMANENT")]}
    result = judge("info", item("A-01"), dump)
    assert result.status is CheckStatus.PASS
    assert "/tmp/" not in result.detail
    assert "key[0]['name'] = \"country_boundaries@PERMANENT\"" in result.detail
    assert "key[1]['name'] = \"countries@PERMANENT\"" in result.detail
    assert result.detail.endswith('against "countries@PERMANENT"')


def test_a_properties_dialog_option_is_named_with_its_value() -> None:
    params = [{"name": "width", "value": "1", "description": "x" * 300}]
    dump = {"windows": [{"name": "railroads@PERMANENT", "_data": [{}, {"params": params}]}]}
    result = judge("info", item("B-06"), dump)
    assert result.status is CheckStatus.FAIL
    assert result.detail == "key[0]['value'] = \"1\" against \"2\""


def test_a_scalar_key_is_shown_itself_and_a_long_one_cut_with_its_length() -> None:
    result = judge("info", item("A-06"), {"statusbar": {"scale": 399.99, "mode": 4}})
    assert (result.status, result.detail) == (CheckStatus.PASS, "key = 399.99 against 400")
    result = judge("info", item("B-11"), {"output": "y" * 1000})
    assert result.status is CheckStatus.FAIL
    assert "(1002 chars)" in result.detail and len(result.detail) < 300


def test_an_error_inside_the_expressions_fails_the_check_as_in_scienceboard() -> None:
    dump: dict[str, Any] = {"windows": [{"name": "railroads@PERMANENT", "_data": [{}, None]}]}
    result = judge("info", item("B-06"), dump)
    assert result.status is CheckStatus.FAIL
    assert result.detail.startswith("TypeError in the check")
