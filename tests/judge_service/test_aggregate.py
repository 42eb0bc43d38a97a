"""Voting, ensembles, merging and labelling rules."""

from __future__ import annotations

import pytest

from coda.contracts.training import LabelRule, Vote
from coda.labels import positive_steps
from judge_service.aggregate import (
    build_verdict,
    ensemble_passes,
    merge_first_error,
    merge_redundant,
    voting_at_k,
)


def vote(correct: bool | None, *, redundant: list[int] | None = None, first: int | None = None,
         etype: str | None = None, model: str = "m") -> Vote:
    return Vote(model=model, raw="", parsed=correct is not None, correctness=correct,
                redundant=redundant or [], first_error_step=first, error_type=etype)


@pytest.mark.parametrize(("votes", "expected"), [
    ([vote(True)] * 4, True),
    ([vote(True)] * 3 + [vote(False)], False),
    ([vote(True)] * 3 + [vote(None)], False),  # an unparseable reply is a failed vote
    ([], False),
])
def test_voting_at_k(votes: list[Vote], expected: bool) -> None:
    assert voting_at_k(votes) is expected


def test_ensemble_needs_every_model() -> None:
    assert ensemble_passes({"a": True, "b": True})
    assert not ensemble_passes({"a": True, "b": False})
    assert not ensemble_passes({})


def test_merge_is_conservative() -> None:
    votes = [vote(True, redundant=[3]), vote(False, redundant=[1, 3], first=5, etype="late"),
             vote(False, first=2, etype="early"), vote(None)]
    assert merge_redundant(votes) == [1, 3]
    assert merge_first_error(votes) == (2, "early", None)
    assert merge_first_error([vote(True)]) == (None, None, None)


@pytest.mark.parametrize(("correct", "redundant", "first", "rule", "expected"), [
    (True, [], None, LabelRule.CLEAN_ONLY, [0, 1, 2, 3, 4]),
    (True, [], None, LabelRule.BEFORE_FIRST_ERROR, [0, 1, 2, 3, 4]),
    (True, [3], None, LabelRule.CLEAN_ONLY, []),
    (False, [], 4, LabelRule.CLEAN_ONLY, []),
    (False, [], 4, LabelRule.BEFORE_FIRST_ERROR, [0, 1, 2]),
    (False, [2], 4, LabelRule.BEFORE_FIRST_ERROR, [0]),
    (True, [3], None, LabelRule.BEFORE_FIRST_ERROR, [0, 1]),
    (False, [], 1, LabelRule.BEFORE_FIRST_ERROR, []),
    (False, [], None, LabelRule.BEFORE_FIRST_ERROR, []),
    (False, [], 9, LabelRule.BEFORE_FIRST_ERROR, [0, 1, 2, 3, 4]),
])
def test_positive_steps(correct: bool, redundant: list[int], first: int | None,
                        rule: LabelRule, expected: list[int]) -> None:
    assert positive_steps(correct=correct, redundant=redundant, first_error_step=first,
                          n_steps=5, rule=rule) == expected


def test_build_verdict_keeps_every_vote() -> None:
    votes = [vote(True, model="a"), vote(True, model="a"), vote(True, model="b")]
    verdict = build_verdict(votes, {"a": True, "b": True}, n_steps=3)
    assert verdict.correct and verdict.positive_steps == [0, 1, 2]
    assert len(verdict.votes) == 3

    votes.append(vote(False, first=2, etype="wrong value", model="b"))
    verdict = build_verdict(votes, {"a": True, "b": False}, n_steps=3,
                            rule=LabelRule.BEFORE_FIRST_ERROR)
    assert not verdict.correct
    assert (verdict.first_error_step, verdict.error_type) == (2, "wrong value")
    assert verdict.positive_steps == [0]


def test_build_verdict_drops_steps_out_of_range() -> None:
    verdict = build_verdict([vote(False, redundant=[2, 7], first=9)], {"m": False}, n_steps=3)
    assert verdict.redundant == [2] and verdict.first_error_step is None
