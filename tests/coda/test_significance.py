"""The learning check's statistics (coda/significance.py): Fisher's exact one-sided test and
its exact false-pass rate when nothing is learnt."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coda.significance import (
    false_pass_rate,
    fisher_greater,
    power,
    worst_false_pass_rate,
)


def test_fisher_matches_the_lady_tasting_tea() -> None:
    # Fisher's own example: 3 of 4 against 1 of 4, p = (C(4,3) C(4,1) + 1) / C(8,4) = 17/70
    assert fisher_greater(3, 4, 1, 4) == pytest.approx(17 / 70)
    assert fisher_greater(0, 4, 4, 4) == pytest.approx(1.0)
    assert fisher_greater(4, 4, 0, 4) == pytest.approx(1 / 70)


def test_a_rise_from_a_quarter_to_nine_in_ten_is_found_with_24_episodes_each() -> None:
    assert fisher_greater(22, 24, 6, 24) < 1e-5
    assert power(24, 24, 0.01, 0.25, 0.9) > 0.99


@pytest.mark.parametrize("n", [24, 36])
def test_the_check_passes_by_chance_at_most_one_time_in_a_hundred(n: int) -> None:
    found = worst_false_pass_rate(n, n, 0.01)
    assert found.worst <= 0.01, found
    # the exact sum over every pair of counts, written out once more
    def b(x: int) -> float:
        return math.comb(n, x) * 0.3 ** x * 0.7 ** (n - x)
    by_hand = sum(b(x0) * b(x1) for x0 in range(n + 1) for x1 in range(n + 1)
                  if fisher_greater(x1, n, x0, n) < 0.01)
    assert false_pass_rate(n, n, 0.01, 0.3) == pytest.approx(by_hand)


@given(st.integers(1, 30), st.integers(1, 30), st.data())
def test_p_values_are_probabilities_and_fall_as_the_version_does_better(
        n1: int, n0: int, data: st.DataObject) -> None:
    x0 = data.draw(st.integers(0, n0))
    ps = [fisher_greater(x1, n1, x0, n0) for x1 in range(n1 + 1)]
    assert all(0.0 <= p <= 1.0 for p in ps)
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(ps))


@given(st.integers(1, 12), st.integers(1, 12), st.floats(0.0, 1.0))
def test_the_false_pass_rate_never_exceeds_the_level(n1: int, n0: int, rate: float) -> None:
    assert false_pass_rate(n0, n1, 0.05, rate) <= 0.05 + 1e-12
    assert not math.isnan(false_pass_rate(n0, n1, 0.05, rate))


@pytest.mark.parametrize(("call", "field"), [
    (lambda: fisher_greater(5, 4, 0, 4), "version"),
    (lambda: fisher_greater(1, 4, -1, 4), "warm start"),
    (lambda: fisher_greater(0, 0, 0, 4), "version"),
    (lambda: false_pass_rate(4, 4, 0.0, 0.5), "alpha"),
    (lambda: false_pass_rate(4, 4, 0.01, float("nan")), "rate"),
    (lambda: worst_false_pass_rate(4, 4, 0.01, []), "rates"),
])
def test_bad_input_is_refused_naming_it(call: object, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        call()  # type: ignore[operator]
