"""ScienceBoard's KAlgebra point checks, as plain functions (no I/O).

Facts this module reproduces (ScienceBoard's patched KAlgebra, its ``/func/2d`` and
``/func/3d`` answers, and ``sci/KAlgebra/task.py``):

* A plot's expression is Analitza's ``PlotsFactory::requestPlot`` of what the user typed: a
  declaration's value, an equation ``a=b`` turned into the function ``a-b``, and the free
  variables bound by a lambda (``x^2`` -> ``x->x^2``, ``x^2/16+y^2/9=1`` ->
  ``(x, y)->x^2/16+y^2/9-1``).
* 2D: an expression whose text starts with ``(`` is implicit: ``f(p[a], p[b])`` must be near 0,
  ``a``/``b`` being the lambda's first/second variable letter minus ``x``. Otherwise it is
  explicit: with ``y->...`` the value at ``p[1]`` must be near ``p[0]``, else the value at
  ``p[0]`` near ``p[1]`` (polar ``q->...`` included). A ``diff(...:v)`` expression is first
  wrapped as ``v->(diff(...:v))v``.
* 3D: one surface (the last one plotted from the 3D tab). Implicit when its text has no ``->``
  at position 7 or later (``(x, y, z)->...``): ``f(...)`` near 0; else ``(a, b)->...`` is
  explicit: the value at the named coordinates near the remaining one.
* Each value is Analitza's calculated result as text, read as a number (text that is not a
  number reads 0, as ``QString::toDouble`` does); "near" is ``|l - r| <= 1e-4`` on single
  precision floats. The calculation sees every variable of the calculator with ``f`` bound to
  the plot.
* A point's key is ``"(" + json(x) + ", " + json(y) [+ ", " + json(z)] + ")"``; a 2D plot also
  answers ``color`` (``#rrggbb``) and ``res`` (416, 832, 1664, 3328 for the 2D Graph menu's
  Poor, Normal, Fine, Very Fine), the 3D plot ``style`` (1, 2, 3 for Dots, Lines, Solid).
* The ``eqn`` checker passes when one plot answers every key of the task's ``value`` equally;
  ``#SIZE`` compares the number of 2D plots.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RESOLUTIONS = {"Poor": 416, "Normal": 832, "Fine": 1664, "Very Fine": 3328}
STYLES = {"Dots": 1, "Lines": 2, "Solid": 3}
TOLERANCE = 1e-4
# names the calculator predefines that cannot be assigned in a calculation session
UNASSIGNABLE = frozenset({"i", "true", "false"})

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LAMBDA_2 = re.compile(r"^\(\s*([a-z])\s*,\s*([a-z])\s*\)\s*->")
_LAMBDA_3 = re.compile(r"^\(\s*([a-z])\s*,\s*([a-z])\s*,\s*([a-z])\s*\)\s*->")
_LAMBDA_1 = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*->")


class Unreadable(ValueError):
    """A plot whose expression this module cannot turn into Analitza's form."""


def f32(value: float) -> float:
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def is_near(left: float, right: float) -> bool:
    """ScienceBoard's tolerance: single-precision operands, ``|l - r| <= 1e-4``."""
    return abs(f32(f32(left) - f32(right))) <= TOLERANCE


def to_double(text: str) -> float:
    """``QString::toDouble``: the number the text spells, else 0."""
    try:
        return float(text.strip())
    except ValueError:
        return 0.0


def point_key(point: Sequence[Any]) -> str:
    return "(" + ", ".join(json.dumps(v) for v in point) + ")"


def _top_level_equals(text: str) -> int:
    """Index of an equation's ``=`` (not ``:=``, ``<=``, ``>=``, ``!=``) outside brackets."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "=" and depth == 0:
            before = text[i - 1] if i else ""
            after = text[i + 1] if i + 1 < len(text) else ""
            if before not in ":<>!=" and after != "=":
                return i
    return -1


def _free_coordinates(body: str, coords: str) -> list[str]:
    names = set(_IDENT.findall(body))
    return [c for c in coords if c in names]


def plot_expression(display: str, dim: int) -> str:
    """Analitza's expression text of a plot the user typed as ``display`` (see module doc)."""
    text = display.strip()
    if ":=" in text and _LAMBDA_1.match(text) is None:
        text = text.split(":=", 1)[1].strip()
    for pattern in (_LAMBDA_3, _LAMBDA_2, _LAMBDA_1):
        m = pattern.match(text)
        if m is not None:  # Analitza writes the head as "(x, y)->" / "x->"
            head = m.group(1) if pattern is _LAMBDA_1 else f"({', '.join(m.groups())})"
            return f"{head}->{text[m.end():].strip()}"
    if text.startswith("diff("):
        return text
    eq = _top_level_equals(text)
    body = f"{text[:eq]}-({text[eq + 1:]})" if eq >= 0 else text
    free = _free_coordinates(body, "xyz" if dim == 3 else "xy")
    if not free and dim == 2 and "q" in set(_IDENT.findall(body)):
        free = ["q"]
    if not free:
        raise Unreadable(f"no plot variable in {display!r}")
    if len(free) == 1:
        return f"{free[0]}->{body}"
    return f"({', '.join(free)})->{body}"


@dataclass(frozen=True)
class Query:
    """One calculation: ``call`` evaluated with ``f`` bound to the plot; its value is compared
    with ``target`` (None: with 0)."""

    key: str
    call: str
    target: float | None


def _diff_wrapped(expr: str) -> str:
    colon = expr.find(":")
    var = expr[colon + 1] if colon >= 0 and colon + 1 < len(expr) else "x"
    return f"{var}->({expr}){var}"


def queries_2d(expr: str, points: Sequence[Sequence[Any]]) -> tuple[str, list[Query]]:
    """(the definition of ``f``, one query per point) for a 2D plot's expression text."""
    definition = _diff_wrapped(expr) if expr.startswith("diff") else expr
    out = []
    for p in points:
        key = point_key(p[:2])
        if expr.startswith("("):
            a, b = ord(expr[1]) - ord("x"), ord(expr[4]) - ord("x")
            if not (0 <= a < 2 and 0 <= b < 2):
                raise Unreadable(f"implicit curve over {expr[1]}, {expr[4]}")
            out.append(Query(key, f"f({json.dumps(p[a])}, {json.dumps(p[b])})", None))
        else:
            ind = 1 if expr.startswith("y") else 0
            out.append(Query(key, f"f({json.dumps(p[ind])})", float(p[ind ^ 1])))
    return definition, out


def queries_3d(expr: str, points: Sequence[Sequence[Any]]) -> tuple[str, list[Query]]:
    arrow = expr.find("->")
    implicit = arrow < 0 or arrow >= 7
    out = []
    for p in points:
        key = point_key(p[:3])
        coords = {"x": p[0], "y": p[1], "z": p[2]}
        if implicit:
            names = [expr[1], expr[4], expr[7]] if len(expr) > 7 else []
            if sorted(names) != ["x", "y", "z"]:
                raise Unreadable(f"implicit surface {expr!r} is not over x, y, z")
            args = ", ".join(json.dumps(coords[n]) for n in names)
            out.append(Query(key, f"f({args})", None))
        else:
            a, b = expr[1], expr[4]
            if a not in coords or b not in coords or a == b:
                raise Unreadable(f"surface {expr!r} is not over two of x, y, z")
            rest = next(v for k, v in coords.items() if k not in (a, b))
            args = f"{json.dumps(coords[a])}, {json.dumps(coords[b])}"
            out.append(Query(key, f"f({args})", float(rest)))
    return expr, out


def answers(queries: Sequence[Query], values: Sequence[str]) -> dict[str, Any]:
    """The per-point booleans from the calculated texts (in query order)."""
    out: dict[str, Any] = {}
    for q, text in zip(queries, values, strict=True):
        got = to_double(text)
        out[q.key] = is_near(got, 0.0 if q.target is None else q.target)
    return out


def eqn_passes(plots: Sequence[dict[str, Any]], wanted: dict[str, Any]) -> bool:
    """ScienceBoard: some plot answers every wanted key with the wanted value."""
    return any(all(k in p and p[k] == v for k, v in wanted.items()) for p in plots)
