"""Known defects of ScienceBoard's own GRASS GIS checkers, and the corrected checks that give the
instruction's verdict instead: applied only when the worker runs with
``CODA_WORKER_CHECKER_ERRATA=true`` (default off: ScienceBoard's verdict, so results stay
comparable with its paper's Table 1). Each entry names its task, the task file's defective
``key`` (an erratum applies to an item whose key is exactly that), what is wrong, the evidence
and the corrected check.

Where the corrected checks read: a layer's command (``dump['layers'][i]['cmd']``, as
``("d.vect", {option: value})``), which GRASS sets for a layer added any way (the data
catalog, the console, the Add vector dialog; updated when its properties dialog is applied)
and which is what the layer renders; ScienceBoard's keys read the layer tree item's
properties-dialog options (``dump['windows'][i]['_data'][1]['params']``), which GRASS fills
only once that dialog is applied, and which miss a WHERE clause typed in the first second
after the dialog opens.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus

DIALOG_ONLY = ("it reads the layer's properties-dialog options, which GRASS fills only once "
               "that dialog is applied: the layer added with the right options from the "
               "console or the data catalog fails with \"TypeError in the check\"")
DIALOG_EVIDENCE = ("GRASS 8.2's layer tree stores (layer info, None) for a layer it adds and "
                   "sets the second element from the properties dialog's task only on Apply/"
                   "OK; a console `d.vect ...` with the right options: ScienceBoard's check "
                   "fails, the layer's cmd holds the options (issue 30 point 8; "
                   "tests/worker/test_grass_errata.py)")


def _key(layer: str, option: str) -> str:
    return (f"lambda dump: [param for param in [item for item in dump['windows'] if "
            f"item['name'] == '{layer}@PERMANENT'][0]['_data'][1]['params'] if "
            f"param['name'] == '{option}']")


def layer_options(dump: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The ``d.vect`` options of every layer of map ``name`` (``map@mapset``), in the layer
    tree's order."""
    found = []
    for layer in dump.get("layers") or []:
        cmd = layer.get("cmd") if isinstance(layer, dict) else None
        if (layer.get("name") == name and isinstance(cmd, list) and len(cmd) == 2
                and isinstance(cmd[1], dict)):
            found.append(cmd[1])
    return found


# d.vect's defaults: an option the command leaves out has this value
DEFAULTS = {"display": "shape", "color": "0:29:57", "fill_color": "0:103:204", "width": "0",
            "icon": "basic/x", "size": "5", "where": ""}
COLOR_NAMES = {"white": (255, 255, 255), "black": (0, 0, 0), "red": (255, 0, 0),
               "green": (0, 255, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0),
               "magenta": (255, 0, 255), "cyan": (0, 255, 255)}


def rgba(text: str) -> tuple[int, ...] | None:
    """A GRASS colour (``R:G:B``, ``R:G:B:A``, or a plain name) as RGBA; None if unreadable."""
    text = text.strip().lower()
    if text in COLOR_NAMES:
        return (*COLOR_NAMES[text], 255)
    parts = text.split(":")
    if len(parts) not in (3, 4) or not all(p.strip().isdigit() for p in parts):
        return None
    values = tuple(int(p) for p in parts)
    return values if len(values) == 4 else (*values, 255)


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def display_has(*wanted: str) -> Callable[[str], bool]:
    return lambda v: set(wanted) <= {p.strip() for p in v.split(",")}


def colour_is(want: str) -> Callable[[str], bool]:
    return lambda v: rgba(v) == rgba(want)


def number_is(want: float) -> Callable[[str], bool]:
    return lambda v: number(v) == want


def text_is(want: str) -> Callable[[str], bool]:
    return lambda v: v.strip() == want


WHEELCHAIR_YES = re.compile(r"""\(?\s*"?wheelchair"?\s*==?\s*'yes'\s*\)?""")


def where_is_wheelchair_yes(v: str) -> bool:
    """The clause selects exactly ``wheelchair = 'yes'`` (no other value; spaces, quotes
    round the column and ``==`` allowed)."""
    return WHEELCHAIR_YES.fullmatch(v.strip()) is not None


@dataclass(frozen=True)
class Erratum:
    task: str
    layer: str
    option: str
    wrong: str
    evidence: str
    accepts: Callable[[str], bool]
    corrected: str
    every: bool = False  # every layer of the map must satisfy it (else: one layer)

    @property
    def key(self) -> str:
        return _key(self.layer, self.option)

    @property
    def map_name(self) -> str:
        return f"{self.layer}@PERMANENT"


ERRATA: tuple[Erratum, ...] = (
    Erratum("B-03", "boundary_region", "display", DIALOG_ONLY, DIALOG_EVIDENCE,
            display_has("cat", "topo"), "the layer's cmd display= lists cat and topo"),
    Erratum("B-04", "boundary_region", "fill_color", DIALOG_ONLY, DIALOG_EVIDENCE,
            colour_is("191:191:191"), "the layer's cmd fill_color= is 191:191:191 (alpha 255 "
            "or none)"),
    Erratum("B-05", "roadsmajor", "color", DIALOG_ONLY, DIALOG_EVIDENCE,
            colour_is("255:255:255"), "the layer's cmd color= is 255:255:255 or white"),
    Erratum("B-06", "railroads", "width", DIALOG_ONLY, DIALOG_EVIDENCE, number_is(2),
            "the layer's cmd width= is 2"),
    Erratum("B-07", "firestations", "icon", DIALOG_ONLY, DIALOG_EVIDENCE,
            text_is("basic/marker"), "the layer's cmd icon= is basic/marker"),
    Erratum("B-08", "hospitals", "size", DIALOG_ONLY, DIALOG_EVIDENCE, number_is(10),
            "the layer's cmd size= is 10"),
    Erratum("B-09", "schools", "where",
            DIALOG_ONLY + "; and its predicate only asks that 'wheelchair', '=' and 'yes' "
            "occur in the clause, so `wheelchair = 'yes' OR wheelchair = 'limited'` (which "
            "also marks schools not confirmed accessible) passes; and a clause typed within "
            "about a second of the d.vect dialog opening is missing from the dialog's options "
            "while the layer's cmd keeps it, so a fast agent fails",
            DIALOG_EVIDENCE + "; the OR clause: the task's predicate evaluated on it passes "
            "(tests/worker/test_grass_errata.py)",
            where_is_wheelchair_yes, "every schools layer's cmd where= is exactly "
            "wheelchair = 'yes'", every=True),
)

BY_KEY = {e.key: e for e in ERRATA}


def for_item(item: dict[str, Any]) -> Erratum | None:
    """The erratum for a task's check item (matched on its exact ``key``), if one is known."""
    return BY_KEY.get(str(item.get("key", "")))


def apply(erratum: Erratum, kind: str, dump: dict[str, Any], scienceboard: CheckResult
          ) -> CheckResult:
    """The corrected check on ``dump``; the detail names the erratum, what was read and
    ScienceBoard's own verdict."""
    values = [str(o.get(erratum.option, DEFAULTS[erratum.option]))
              for o in layer_options(dump, erratum.map_name)]
    results = [erratum.accepts(v) for v in values]
    ok = bool(results) and (all(results) if erratum.every else any(results))
    read = (f"{erratum.map_name}'s cmd {erratum.option}= {values!r}" if values
            else f"no layer of {erratum.map_name} in the map")
    return CheckResult(
        type=kind, status=CheckStatus.PASS if ok else CheckStatus.FAIL,
        detail=f"erratum {erratum.task} applied ({erratum.corrected}): read {read}; "
               f"ScienceBoard's check: {scienceboard.status.value} ({scienceboard.detail})")
