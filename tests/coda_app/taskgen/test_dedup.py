"""Near-duplicate detection of instructions."""

from __future__ import annotations

import pytest

from coda_app.taskgen.dedup import Deduplicator, normalise, similarity


def test_normalise() -> None:
    assert normalise("  Plot  SIN(x)!\n") == "plot sin x"
    assert normalise("\uff30\uff4c\uff4f\uff54") == "plot"


def test_similarity() -> None:
    assert similarity("Plot sin(x).", "plot sin x") == 1.0
    assert similarity("Plot sin(x) in 2D", "Plot cos(x) in 2D") < 0.85
    assert similarity("Plot the graph of sin(x) in the 2D view", "plot the graph of sin(x) in "
                      "the 2D views") > 0.85
    assert similarity("Plot sin(x)", "Open the preferences dialog") < 0.5


def test_deduplicator() -> None:
    d = Deduplicator(0.85, seen=["Plot the function y = sin(x) in the 2D view."])
    assert not d.add("plot the function y = sin(x) in the 2D view")
    assert not d.add("Plot the function y = sin(x) in the 2D views.")
    assert d.add("Compute the derivative of x^3 and show it.")
    assert not d.add("Compute the derivative of x^3 and show it!")
    assert not d.add("   ")
    assert d.add("Plot the function y = cos(2x) in the 3D view.")


def test_threshold_is_checked() -> None:
    with pytest.raises(ValueError):
        Deduplicator(0)
