"""ScienceBoard's KAlgebra point checks (``worker.tasks.adapters.kalgebra.points``): the
reference answers of every bundled plot task pass and a wrong plot fails, calculated by the real
``calgebra`` (Analitza, KAlgebra's library); tolerance and expression rules on their own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from worker.tasks.adapters.kalgebra import desktop, points

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "KAlgebra"
# task -> what its reference answer plots (ScienceBoard's ``ans``), and a wrong plot
PLOTS = {
    "A-02": ("x->ln(x)^2", "x->ln(x)"), "A-03": ("x^2+y^2-z^2=1", "x^2+y^2+z^2=1"),
    "B-01": ("x->x^2", "x->x^3"), "B-07": ("(x, y) -> sin(x^2)+sin(y^2)-e^(sin(x)+sin(y))",
                                         "(x, y)->sin(x)^2+cos(y)^2-1/(x^2*y^2)"),
    "C-07": ("diff(ln(x^2+1)+x^2-x:x)", "diff(ln(x+1)+x^2-x:x)"),
    "C-10": ("x->(x->1/x-ln(x))((x->(1+x^2)*e^x-1)(x))", "x->1/x-ln(x)"),
    "C-11": ("x=(y+2)*ln(y)", "y=(x+2)*ln(x)"), "C-12": ("(x^2+y^2)^2=32*(x^2-y^2)",
                                                        "(x^2+y^2)^2=16*(x^2-y^2)"),
    "C-13": ("x->piecewise{x<=0 ? (x^2-x)*e^x-1, ? (x^2+x)*e^(-x)-1}", "x->(x^2-x)*e^x-1"),
    "C-14": ("x^2+y^2+z^2=8", "x^2+y^2+z^2=4"), "C-15": ("x+y/2+z/3=1", "x+y+z=1"),
    "C-16": ("3x+y-z=2", "3x+y-z=-4"), "C-17": ("x^2+y^2+z^2+2x*z=1", "x^2+y^2+z^2=1"),
}


def _calgebra() -> str:
    found = shutil.which("calgebra")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("calgebra (Debian package kalgebra) is missing")
        pytest.skip("calgebra is not installed (scripts/desktop-deps.sh)")
    return found


def _answers(expr: str, item: dict, dim: int) -> dict:
    make = points.queries_3d if dim == 3 else points.queries_2d
    definition, queries = make(points.plot_expression(expr, dim), item["key"])
    lines = ["e:=2.718281828", f"f:={definition}", *[q.call for q in queries]]
    done = subprocess.run([_calgebra(), "--calculate"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=60, check=True)
    return points.answers(queries, desktop.parse_session(done.stderr, lines)[2:])


@pytest.mark.parametrize("name", sorted(PLOTS))
def test_reference_answer_passes_and_wrong_plot_fails(name: str) -> None:
    task = json.loads((TASKS / f"{name}.json").read_text())
    right, wrong = PLOTS[name]
    for item in task["evaluate"]:
        pts = item["key"]
        wanted = {k: v for k, v in item["value"].items() if k.startswith("(")}
        dim = len(pts[0])
        assert points.eqn_passes([_answers(right, item, dim)], wanted), name
    item = task["evaluate"][0]
    wanted = {k: v for k, v in item["value"].items() if k.startswith("(")}
    assert not points.eqn_passes([_answers(wrong, item, len(item["key"][0]))], wanted)


def test_tolerance_is_single_precision_1e4() -> None:
    assert points.is_near(16852337.6462, 16852337.69353376)  # one float32 step apart at most
    assert points.is_near(1.00005, 1.0) and not points.is_near(1.0002, 1.0)
    assert not points.is_near(float("nan"), 0.0) and not points.is_near(1e39, 1e39 + 1)
    assert points.to_double("Error:\n - x") == 0.0 and points.to_double("2.5") == 2.5


def test_expression_rules() -> None:
    assert points.plot_expression("x^2/16+y^2/9=1", 2) == "(x, y)->x^2/16+y^2/9-(1)"
    assert points.plot_expression("x^2", 2) == "x->x^2"
    assert points.plot_expression("q->2*q", 2) == "q->2*q"
    assert points.plot_expression("x^2-y^2=2", 3) == "(x, y)->x^2-y^2-(2)"
    assert points.point_key([0, -0.0, 1]) == "(0, -0.0, 1)"
    with pytest.raises(points.Unreadable):
        points.plot_expression("7", 2)
    _, queries = points.queries_2d("y->y^2", [[4, 2]])
    assert queries[0].call == "f(2)" and queries[0].target == 4.0


def test_calgebra_session_parsing() -> None:
    out = "x->x^2\n9\nError:\n - Cannot divide by 0.\n\nExit.\n"
    assert desktop.parse_session(out, ["a", "b", "c"]) == [
        "x->x^2", "9", "Error:\n - Cannot divide by 0."]
