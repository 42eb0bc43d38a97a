"""Did a planner version beat the warm start, or could chance have done it? (pure functions)

The learning check compares two success counts: ``x0`` of ``n0`` episodes of the warm start
and ``x1`` of ``n1`` episodes of the version under test. :func:`fisher_greater` is the one-sided
p-value of Fisher's exact test (conditional on the total successes, the version's count is
hypergeometric when both have one rate): unlike the normal approximation of the two-proportion
z-test it never rejects more often than its level, whatever the common rate and however few the
episodes. :func:`false_pass_rate` is how often a check ``p < alpha`` passes when nothing was
learnt (both counts binomial with one rate), computed exactly over every pair of counts;
:func:`worst_false_pass_rate` is its largest value over a grid of rates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache


def _check_counts(x: int, n: int, name: str) -> None:
    if n < 1:
        raise ValueError(f"{name}: at least one episode, not {n}")
    if not 0 <= x <= n:
        raise ValueError(f"{name}: successes {x} outside 0..{n}")


@lru_cache(maxsize=65536)
def fisher_greater(x1: int, n1: int, x0: int, n0: int) -> float:
    """One-sided p-value of Fisher's exact test that the rate behind ``x1 / n1`` is above the
    one behind ``x0 / n0``: the chance, given ``x0 + x1`` successes over both, that the
    version's episodes hold ``x1`` or more of them."""
    _check_counts(x1, n1, "version")
    _check_counts(x0, n0, "warm start")
    k, total = x0 + x1, n0 + n1
    denominator = math.comb(total, k)
    tail = sum(math.comb(n1, j) * math.comb(n0, k - j)
               for j in range(x1, min(n1, k) + 1) if k - j <= n0)
    return min(1.0, tail / denominator)


def _binomial(n: int, p: float) -> list[float]:
    return [math.comb(n, x) * p ** x * (1 - p) ** (n - x) for x in range(n + 1)]


def false_pass_rate(n0: int, n1: int, alpha: float, rate: float) -> float:
    """P(fisher_greater < alpha) when both counts are binomial with the same ``rate``: how
    often the check passes with nothing learnt (exact, every pair of counts)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: between 0 and 1, not {alpha}")
    if not 0 <= rate <= 1:
        raise ValueError(f"rate: between 0 and 1, not {rate}")
    _check_counts(0, n0, "warm start")
    _check_counts(0, n1, "version")
    b0, b1 = _binomial(n0, rate), _binomial(n1, rate)
    return sum(b0[x0] * b1[x1] for x0 in range(n0 + 1) for x1 in range(n1 + 1)
               if fisher_greater(x1, n1, x0, n0) < alpha)


@dataclass(frozen=True)
class FalsePass:
    n0: int
    n1: int
    alpha: float
    worst_rate: float
    """The common success rate at which the check passes most often by chance."""
    worst: float
    """How often it passes by chance at that rate."""


def worst_false_pass_rate(n0: int, n1: int, alpha: float,
                          rates: Iterable[float] | None = None) -> FalsePass:
    """The largest :func:`false_pass_rate` over ``rates`` (default: 0.01 to 0.99 by 0.01)."""
    grid = list(rates) if rates is not None else [r / 100 for r in range(1, 100)]
    if not grid:
        raise ValueError("rates: at least one")
    worst = max(grid, key=lambda r: false_pass_rate(n0, n1, alpha, r))
    return FalsePass(n0, n1, alpha, worst, false_pass_rate(n0, n1, alpha, worst))


def power(n0: int, n1: int, alpha: float, rate0: float, rate1: float) -> float:
    """How often the check passes when the warm start's rate is ``rate0`` and the version's
    ``rate1`` (exact)."""
    b0, b1 = _binomial(n0, rate0), _binomial(n1, rate1)
    return sum(b0[x0] * b1[x1] for x0 in range(n0 + 1) for x1 in range(n1 + 1)
               if fisher_greater(x1, n1, x0, n0) < alpha)
