"""Table-driven tests of the judge reply parser."""

from __future__ import annotations

import pytest

from judge_service.parsing import parse_instruction_check, parse_vote

GOOD = ('step 1: the app opens.\nstep 2: the plot shows.\n{"Correctness": true, "Redundant": [], '
        '"First_Error_Step": null, "Error_Type": "", "Correct_Action": ""}')

CASES = [
    # raw, parsed, correctness, redundant, first_error, error_type
    (GOOD, True, True, [], None, None),
    ('```json\n{"Correctness": false, "Redundant": [3, 2, 2], "First_Error_Step": 4, '
     '"Error_Type": "wrong element", "Correct_Action": "click OK"}\n```',
     True, False, [2, 3], 4, "wrong element"),
    ('{"correctness": "false", "redundant": "5", "first_error_step": "2"}',
     True, False, [5], 2, None),
    ('{"Correctness": true, "First_Error_Step": 0, "Redundant": [0, -1, "x"]}',
     True, True, [], None, None),
    ('draft {"Correctness": "maybe"} final {"Correctness": false}', True, False, [], None, None),
    ("The agent succeeded.", False, None, [], None, None),
    ('{"Correctness": "probably"}', False, None, [], None, None),
    ('{"Correctness": 1}', False, None, [], None, None),
    ('{"Correctness": true', False, None, [], None, None),
    ("", False, None, [], None, None),
]


@pytest.mark.parametrize(("raw", "parsed", "correct", "redundant", "first", "etype"), CASES)
def test_parse_vote(raw: str, parsed: bool, correct: bool | None, redundant: list[int],
                    first: int | None, etype: str | None) -> None:
    vote = parse_vote(raw, model="m", resolution="low")
    assert (vote.parsed, vote.correctness, vote.redundant, vote.first_error_step,
            vote.error_type) == (parsed, correct, redundant, first, etype)
    assert vote.raw == raw and vote.model == "m" and vote.resolution == "low"


@pytest.mark.parametrize(("raw", "expected"), [
    ('{"Clear": true, "Executable": true, "Judgeable": false, "Reason": "no visible result"}',
     (True, True, False, "no visible result", True)),
    ('{"Clear": "yes", "Executable": "no", "Judgeable": true}', (True, False, True, None, True)),
    ('{"Clear": true}', (False, False, False, None, False)),
    ("looks fine", (False, False, False, None, False)),
])
def test_parse_instruction_check(raw: str, expected: tuple) -> None:
    assert parse_instruction_check(raw) == expected
