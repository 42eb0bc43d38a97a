"""The labelling rule: which steps of a judged trajectory are positive (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from coda.contracts.training import LabelRule, Verdict


def positive_steps(
    *,
    correct: bool,
    redundant: Sequence[int],
    first_error_step: int | None,
    n_steps: int,
    rule: LabelRule = LabelRule.CLEAN_ONLY,
) -> list[int]:
    """0-based indices of the steps labelled positive.

    - clean success (correct, nothing redundant, no first error): every step, under any rule;
    - ``CLEAN_ONLY`` (CODA, default): nothing otherwise;
    - ``BEFORE_FIRST_ERROR`` (SEAgent): steps numbered before ``min(first error, first
      redundant)``; with neither named (a failure nobody located) nothing.
    """
    clean = correct and not redundant and first_error_step is None
    if clean:
        return list(range(n_steps))
    if rule is LabelRule.CLEAN_ONLY:
        return []
    marks = [s for s in (first_error_step, min(redundant, default=None)) if s is not None]
    if not marks:
        return []
    cut = min(marks)  # 1-based step number; steps 1..cut-1 are positive
    return list(range(min(cut - 1, n_steps)))


def label_verdict(verdict: Verdict, n_steps: int, rule: LabelRule) -> list[int]:
    """The positive steps of a stored trajectory of ``n_steps`` steps under ``rule``."""
    return positive_steps(correct=verdict.correct, redundant=verdict.redundant,
                          first_error_step=verdict.first_error_step, n_steps=n_steps, rule=rule)
