"""Vote aggregation and labelling rules (pure).

Decision: a model passes when *all* its votes parse and say correct (voting@k; an
unparseable reply is a failed vote); an ensemble passes when every model passes.

Merging across votes (documented rule, conservative, for precision of positive labels):
- ``redundant``: the union of the steps any parsed vote calls redundant;
- ``first_error_step``: the earliest step any parsed vote names as the first error;
  ``error_type`` / ``correct_action`` come from the first vote naming that step.
A single dissenting vote can therefore only remove positive labels, never add them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from coda.contracts.training import LabelRule, Verdict, Vote
from coda.labels import positive_steps


def vote_passes(vote: Vote) -> bool:
    """A vote passes when it parsed and says the task is correct."""
    return vote.parsed and vote.correctness is True


def voting_at_k(votes: Sequence[Vote]) -> bool:
    """Pass only if there is at least one vote and every vote passes."""
    return bool(votes) and all(vote_passes(v) for v in votes)


def ensemble_passes(model_results: Mapping[str, bool]) -> bool:
    """Pass only if at least one model judged and every model passed."""
    return bool(model_results) and all(model_results.values())


def merge_redundant(votes: Iterable[Vote]) -> list[int]:
    """Union of the redundant steps of the parsed votes, sorted."""
    return sorted({s for v in votes if v.parsed for s in v.redundant})


def merge_first_error(votes: Iterable[Vote]) -> tuple[int | None, str | None, str | None]:
    """(earliest first-error step, its error type, its correct action) over parsed votes."""
    best: Vote | None = None
    for v in votes:
        if not v.parsed or v.first_error_step is None:
            continue
        if best is None or v.first_error_step < (best.first_error_step or 0):
            best = v
    if best is None:
        return None, None, None
    return best.first_error_step, best.error_type, best.correct_action


def build_verdict(
    votes: Sequence[Vote],
    model_results: Mapping[str, bool],
    *,
    n_steps: int,
    rule: LabelRule = LabelRule.CLEAN_ONLY,
) -> Verdict:
    """The verdict from every vote cast and each model's pass/fail."""
    correct = ensemble_passes(model_results)
    redundant = [s for s in merge_redundant(votes) if s <= n_steps]
    first_error, error_type, correct_action = merge_first_error(votes)
    if first_error is not None and first_error > n_steps:
        first_error, error_type, correct_action = None, None, None
    return Verdict(
        correct=correct,
        redundant=redundant,
        first_error_step=first_error,
        error_type=error_type,
        correct_action=correct_action,
        votes=list(votes),
        positive_steps=positive_steps(correct=correct, redundant=redundant,
                                      first_error_step=first_error, n_steps=n_steps, rule=rule),
    )
