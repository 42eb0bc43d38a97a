"""Known defects of ScienceBoard's own Celestia answers (:mod:`worker.tasks.answer_errata`:
applied only with ``CODA_WORKER_CHECKER_ERRATA=true``)."""

from __future__ import annotations

from worker.tasks.answer_errata import AnswerErratum

APP = "celestia"


ERRATA: tuple[AnswerErratum, ...] = (
    AnswerErratum(
        APP, "D-02", "Answer the question: on which day of December will the last lunar eclipse "
        "occur on Earth in 2056?", ("21",), (("21",), ("22",)),
        "the eclipse spans December 21-22 UT (it begins on the 21st and ends on the 22nd), so "
        "the question has two right answers; only \"21\" passes",
        "issue 38 (point 7) found the eclipse across the UT midnight of Dec 21-22 in this "
        "Celestia; independently, Meeus's full-moon terms put December 2056's full moon, near "
        "its node, at about 01:36 UT on the 22nd, so the penumbral phase begins on the 21st "
        "(tests/worker/test_celestia_errata.py computes it)"),
    AnswerErratum(
        APP, "D-03", "What is the difference value in viewing angle between the Sun and the Earth "
        "when viewed from Mars on May 28, 2150? Submit your answer with one decimal place.",
        ("30.5",), (("33.0",), ("33.1",)),
        "the Sun-Earth angle seen from Mars on 2150-05-28 is 33.0 degrees (33.00 at 0h UT, "
        "33.12 at the day's end), not 30.5",
        "issue 38 (point 7) read 33.0 degrees in this Celestia on 2150-05-28; independently, "
        "JPL's Keplerian elements for approximate positions of the planets (Standish, Table 1) "
        "give 33.00 at 0h UT and 33.12 at 24h UT (tests/worker/test_celestia_errata.py "
        "computes it)"),
)
