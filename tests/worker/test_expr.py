"""The safe expression subset (worker/tasks/expr.py): every lambda of ScienceBoard's bundled
task files compiles, Celestia B-12's geometry check decides, and what is outside the subset or
its bounds is refused quickly, not run (issue 38, point 7)."""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from pathlib import Path
from typing import Any

import pytest

from coda.contracts.desktop import CheckStatus
from coda.tasks import load_task_file
from worker.tasks import coverage
from worker.tasks.adapters.grass.checkers import judge
from worker.tasks.expr import (
    MAX_LEN,
    ExpressionLimit,
    UnsafeExpression,
    compile_lambda,
)

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM"


def _lambdas(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _lambdas(v)]
    if isinstance(value, list):
        return [s for v in value for s in _lambdas(v)]
    return [value] if isinstance(value, str) and value.strip().startswith("lambda") else []


def test_every_bundled_lambda_compiles() -> None:
    sources = [s for f in sorted(TASKS.rglob("*.json"))
               for s in _lambdas(json.loads(f.read_text()))]
    assert len(sources) > 150
    for source in sources:
        compile_lambda(source)


def test_arithmetic_walrus_and_math() -> None:
    assert compile_lambda("lambda a, b: (a * b, a / b, a ** 2, -a + b, a - b, a % b)")(6, 4) \
        == (24, 1.5, 36, -2, 2, 2)
    assert compile_lambda("lambda v: (n := v[0] * 2, n + 1)[-1]")([3]) == 7
    assert compile_lambda("lambda v: __import__('math').sqrt(v[0] ** 2 + v[1] ** 2)")([3, 4]) == 5
    assert compile_lambda("lambda: round(__import__('math').degrees(__import__('math').pi), 1)"
                          )() == 180.0
    assert compile_lambda("lambda v: [x * x for x in range(len(v))]")("abc") == [0, 1, 4]
    assert compile_lambda("lambda s: '-'.join(s.split(',')).upper()")("a,b") == "A-B"


@pytest.mark.parametrize("source", [
    "lambda: __import__('os').system('true')",
    "lambda: __import__('math').__loader__",
    "lambda: __import__('math').factorial(10)",
    "lambda: __import__('sys')",
    "lambda: __import__('datetime').sys",
    "lambda: ().__class__",
    "lambda: ().__class__.__bases__[0].__subclasses__()",
    "lambda k: k.__class__",
    "lambda k: [x.__class__ for x in k]",
    "lambda k: str.join",
    "lambda k: (x for x in k)",
    "lambda k: {x: 1 for x in k}",
    "lambda k: f'{k.__class__}'",
    "lambda k: '{0.__class__}'.format(k)",
    "lambda k: (lambda f: f(f))(lambda f: f(f))",
    "lambda k: (__builtins__ := 1)",
    "lambda k: __coda_attr__(k, '__class__')",
    "lambda k: getattr(k, 'x')",
    "lambda k: open('/etc/passwd')",
    "lambda k: eval('1')",
    "print('not a lambda')",
    "lambda k: 1\x00",
    "lambda k: '\x00'.__class__",
    "lambda",
    "",
])
def test_outside_the_subset_is_refused(source: str) -> None:
    with pytest.raises(UnsafeExpression):
        compile_lambda(source)(*([] if source.startswith("lambda:") else ["k"]))


@pytest.mark.parametrize("source", [
    "lambda: 10 ** 10 ** 10",
    "lambda: 9 ** 99999",
    "lambda: (x := 2 ** 4000, x * x)",
    "lambda: 'a' * 10 ** 9",
    "lambda: [0] * 10 ** 9",
    "lambda: (a := 'x' * 10 ** 5, b := a + a, c := b + b, d := c + c, e := d + d, e + e)",
    "lambda: (a := 'x' * 10 ** 5).join(a)",
    "lambda: 'a' in range(10 ** 18)",
    "lambda: [i for i in range(10 ** 6) for j in range(10 ** 6)]",
    "lambda: 2.0 ** 100000",
    "lambda: __import__('math').exp(10 ** 4)",
    "lambda: '%0999999999d' % 1",
    "lambda: " + "[" * 100 + "1" + "]" * 100,
    "lambda: " + "-" * 500 + "1",
    "lambda: " + "1 + " * 3000 + "1",
])
def test_past_the_bounds_is_refused_quickly(source: str) -> None:
    start = time.monotonic()
    with pytest.raises(UnsafeExpression):
        compile_lambda(source)()
    assert time.monotonic() - start < 8


def test_errors_inside_are_value_errors_or_the_expression_s_own() -> None:
    """What a checker turns into a failed check: ExpressionLimit is a ValueError."""
    assert issubclass(ExpressionLimit, ValueError)
    with pytest.raises(ZeroDivisionError):
        compile_lambda("lambda a: a / 0")(1)
    assert len(compile_lambda(f"lambda: 'a' * {MAX_LEN}")()) == MAX_LEN


def test_random_garbage_never_escapes() -> None:
    """Random printable text and random recombinations of the subset's tokens: refused, or an
    ordinary value/expression error, never anything else."""
    rng = random.Random(38)
    tokens = ["lambda", "k", ":", "(", ")", "[", "]", "*", "**", "/", "+", "-", "%", ":=",
              ".", "__class__", "sqrt", "join", "'a'", "9", "10", ",", "__import__",
              "'math'", "'os'", "range", "for", "in", "if", " "]
    for _ in range(3000):
        if rng.random() < 0.5:
            source = "lambda k: " + " ".join(rng.choice(tokens) for _ in range(rng.randint(1, 14)))
        else:
            source = "".join(chr(rng.randint(0, 127)) for _ in range(rng.randint(0, 40)))
        with contextlib.suppress(UnsafeExpression, ValueError, TypeError, ZeroDivisionError,
                                 IndexError, KeyError, AttributeError):
            _call(compile_lambda(source))


def _call(fn: Any) -> None:
    for args in ((), (7,), (7, 2)):
        try:
            fn(*args)
            return
        except TypeError:
            continue


# --- Celestia B-12: its fourth check, on dumps built as data --------------------------------

B12 = load_task_file(TASKS / "Celestia" / "B-12.json")


def _b12_dump(moon_off_axis_km: float, sol_visible: bool = False) -> dict[str, Any]:
    """The observer near Earth; the Moon 384,400 km from Earth towards the Sun, pushed
    ``moon_off_axis_km`` sideways; the Sun 1 AU away (km)."""
    earth = [1.2e8, 9.0e7, 1.0e3]
    sun = [0.0, 0.0, 0.0]
    towards = [(s - e) / math.dist(sun, earth) for s, e in zip(sun, earth, strict=True)]
    side = [-towards[1], towards[0], 0.0]
    moon = [e + 384_400 * t + moon_off_axis_km * s
            for e, t, s in zip(earth, towards, side, strict=True)]
    return {"entity": {"Earth": {"distance": 52_000.0, "visible": True, "position": earth},
                       "Sol": {"distance": 1.5e8, "visible": sol_visible, "position": sun},
                       "Moon": {"distance": 340_000.0, "visible": True, "position": moon}}}


def _b12_statuses(dump: dict[str, Any]) -> list[CheckStatus]:
    items = [e.model_dump() for e in B12.evaluators]
    return [judge("info", item, dump).status for item in items]


def test_b12_checks_decide_a_right_and_a_near_miss_state() -> None:
    assert _b12_statuses(_b12_dump(0.0)) == [CheckStatus.PASS] * 4
    # 0.99 = cos(8.1 deg): the Moon 50,000 km off the Sun-Earth line is 7.4 deg off, 60,000 is
    # 8.9 deg off
    assert _b12_statuses(_b12_dump(50_000.0))[3] is CheckStatus.PASS
    near_miss = _b12_statuses(_b12_dump(60_000.0))
    assert near_miss[:3] == [CheckStatus.PASS] * 3 and near_miss[3] is CheckStatus.FAIL
    assert _b12_statuses(_b12_dump(0.0, sol_visible=True))[1] is CheckStatus.FAIL
    detail = judge("info", B12.evaluators[3].model_dump(), _b12_dump(60_000.0)).detail
    assert "against 0.99" in detail


def test_coverage_does_not_count_a_task_whose_checker_cannot_run(tmp_path: Path) -> None:
    """B-12 with its fourth check made one the subset refuses: not implemented, named."""
    raw = json.loads((TASKS / "Celestia" / "B-12.json").read_text())
    assert coverage.missing_pieces(B12) == []
    raw["evaluate"][3]["key"] = "lambda dump: __import__('os').getcwd()"
    (tmp_path / "Celestia").mkdir()
    (tmp_path / "Celestia" / "B-12.json").write_text(json.dumps(raw))
    report = coverage.coverage(tmp_path, which=lambda p: "/usr/bin/" + p)
    assert (report.total.tasks, report.total.implemented, report.total.runnable) == (1, 0, 0)
    [reason] = report.total.reasons
    assert "checker 'info' expression its 'key'" in reason and "getcwd" in reason
