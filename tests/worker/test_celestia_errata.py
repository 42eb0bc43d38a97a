"""The opt-in corrected Celestia answers (worker/tasks/adapters/celestia/errata.py): D-02's
two-day eclipse and D-03's Sun-Earth angle, in both modes, with an independent computation of
each answer (Meeus's full-moon terms; JPL's approximate Keplerian elements) as the evidence."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import pytest

from coda.contracts.desktop import CheckStatus, CheckVerdict, EpisodeEnd
from coda.tasks import load_task_file
from worker.tasks import answer_errata
from worker.tasks.adapters.celestia import errata
from worker.tasks.checkers import run_checkers
from worker.tasks.context import TaskContext

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "Celestia"


def verdict(task: str, answer: str, *, on: bool) -> tuple[CheckVerdict, str]:
    ctx = TaskContext(task=load_task_file(TASKS / f"{task}.json"), guest=cast(Any, None),
                      errata=on)  # answer tasks read nothing from the desktop
    outcome = run_checkers(ctx, EpisodeEnd(kind="ANS", answer=answer))
    return outcome.verdict, outcome.results[0].detail


def test_every_erratum_names_its_task_file() -> None:
    assert [e.task for e in errata.ERRATA] == ["D-02", "D-03"]
    for erratum in errata.ERRATA:
        task = load_task_file(TASKS / f"{erratum.task}.json")
        [item] = [e.model_dump() for e in task.evaluators]
        assert answer_errata.for_stop(task, item, errata.ERRATA) is erratum
        assert erratum.wrong and erratum.evidence


@pytest.mark.parametrize(("task", "answer", "off", "on"), [
    ("D-02", "21", CheckVerdict.SUCCESS, CheckVerdict.SUCCESS),
    ("D-02", "22", CheckVerdict.FAILURE, CheckVerdict.SUCCESS),
    ("D-02", "23", CheckVerdict.FAILURE, CheckVerdict.FAILURE),
    ("D-03", "30.5", CheckVerdict.SUCCESS, CheckVerdict.FAILURE),
    ("D-03", "33.0", CheckVerdict.FAILURE, CheckVerdict.SUCCESS),
    ("D-03", "33.1", CheckVerdict.FAILURE, CheckVerdict.SUCCESS),
    ("D-03", "33", CheckVerdict.FAILURE, CheckVerdict.FAILURE),
    ("D-03", "32.9", CheckVerdict.FAILURE, CheckVerdict.FAILURE),
])
def test_both_modes(task: str, answer: str, off: CheckVerdict, on: CheckVerdict) -> None:
    assert verdict(task, answer, on=False)[0] is off
    got, detail = verdict(task, answer, on=True)
    assert got is on
    assert detail.startswith(f"erratum {task} applied") and "ScienceBoard's check" in detail


def test_an_erratum_needs_the_task_s_own_instruction_and_words() -> None:
    task = load_task_file(TASKS / "D-03.json")
    item = task.evaluators[0].model_dump()
    other = task.model_copy(update={"instruction": "Other?"})
    assert answer_errata.for_stop(other, item, errata.ERRATA) is None
    assert answer_errata.for_stop(task, {**item, "args": ["31.0"]}, errata.ERRATA) is None
    assert answer_errata.for_stop(task.model_copy(update={"app": "KAlgebra"}), item,
                                  errata.ERRATA) is None
    ctx = TaskContext(task=task, guest=cast(Any, None), errata=True)
    done = run_checkers(ctx, EpisodeEnd(kind="DONE"))
    assert done.verdict is CheckVerdict.FAILURE and done.results[0].status is CheckStatus.FAIL


# --- the evidence, computed independently of Celestia ----------------------------------------

# JPL, "Keplerian Elements for Approximate Positions of the Major Planets" (E. M. Standish),
# Table 1: a (au), e, I, L, long. of perihelion, long. of node (deg), each with its rate per
# Julian century from J2000
EM_BARY = ((1.00000261, 0.00000562), (0.01671123, -0.00004392), (-0.00001531, -0.01294668),
           (100.46457166, 35999.37244981), (102.93768193, 0.32327364), (0.0, 0.0))
MARS = ((1.52371034, 0.00001847), (0.09339410, 0.00007882), (1.84969142, -0.00813131),
        (-4.55343205, 19140.30268499), (-23.94362959, 0.44441088),
        (49.55953891, -0.29257343))


def julian_day(year: int, month: int, day: float) -> float:
    if month <= 2:
        year, month = year - 1, month + 12
    century = year // 100
    return (int(365.25 * (year + 4716)) + int(30.6001 * (month + 1)) + day
            + 2 - century + century // 4 - 1524.5)


def heliocentric(elements: tuple[tuple[float, float], ...], jd: float) -> list[float]:
    t = (jd - 2451545.0) / 36525
    a, e, inc, mean_lon, peri, node = (v + r * t for v, r in elements)
    mean = math.radians((mean_lon - peri + 180) % 360 - 180)
    ecc = mean
    for _ in range(30):
        ecc -= (ecc - e * math.sin(ecc) - mean) / (1 - e * math.cos(ecc))
    x, y = a * (math.cos(ecc) - e), a * math.sqrt(1 - e * e) * math.sin(ecc)
    w, o, i = math.radians(peri - node), math.radians(node), math.radians(inc)
    return [(math.cos(w) * math.cos(o) - math.sin(w) * math.sin(o) * math.cos(i)) * x
            + (-math.sin(w) * math.cos(o) - math.cos(w) * math.sin(o) * math.cos(i)) * y,
            (math.cos(w) * math.sin(o) + math.sin(w) * math.cos(o) * math.cos(i)) * x
            + (-math.sin(w) * math.sin(o) + math.cos(w) * math.cos(o) * math.cos(i)) * y,
            math.sin(w) * math.sin(i) * x + math.cos(w) * math.sin(i) * y]


def sun_earth_angle_from_mars(jd: float) -> float:
    earth, mars = heliocentric(EM_BARY, jd), heliocentric(MARS, jd)
    to_sun = [-c for c in mars]
    to_earth = [e - m for e, m in zip(earth, mars, strict=True)]
    cos = sum(s * e for s, e in zip(to_sun, to_earth, strict=True)) / (
        math.hypot(*to_sun) * math.hypot(*to_earth))
    return math.degrees(math.acos(cos))


def test_d03_the_angle_on_2150_05_28_is_33_degrees() -> None:
    start, end = (sun_earth_angle_from_mars(julian_day(2150, 5, 28 + h / 24)) for h in (0, 24))
    assert round(start, 1) == 33.0 and round(end, 1) == 33.1  # 33.00 at 0h UT, 33.12 at 24h
    assert abs(start - 30.5) > 2


def full_moon(k: float) -> tuple[float, float]:
    """Meeus, Astronomical Algorithms ch. 49: the full moon ``k`` (JDE) and its argument of
    latitude F (deg; an eclipse needs F within about 13 deg of a node)."""
    t = k / 1236.85
    e = 1 - 0.002516 * t
    m, mp, f = (math.radians(v) for v in (2.5534 + 29.10535670 * k,
                                          201.5643 + 385.81693528 * k + 0.0107582 * t * t,
                                          160.7108 + 390.67050284 * k))
    terms = (-0.40614 * math.sin(mp) + 0.17302 * e * math.sin(m) + 0.01614 * math.sin(2 * mp)
             + 0.01043 * math.sin(2 * f) + 0.00734 * e * math.sin(mp - m)
             - 0.00515 * e * math.sin(mp + m) + 0.00209 * e * e * math.sin(2 * m)
             - 0.00111 * math.sin(mp - 2 * f) - 0.00057 * math.sin(mp + 2 * f))
    return (2451550.09766 + 29.530588861 * k + 0.00015437 * t * t + terms,
            math.degrees(f) % 360)


def test_d02_the_eclipse_crosses_midnight_ut() -> None:
    """December 2056's full moon is near its node (an eclipse) at about 01:36 UT on the 22nd;
    the penumbral phase of a partial eclipse lasts over 4 hours, so it starts on the 21st."""
    jde, f = full_moon(704.5)
    assert min(f, 360 - f, abs(f - 180)) < 13
    midnight = julian_day(2056, 12, 22)
    assert 1.0 < (jde - midnight) * 24 < 2.0
