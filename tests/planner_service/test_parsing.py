"""Table-driven tests of the planner output parser."""

from __future__ import annotations

import pytest

from planner_service.parsing import ParsedPlan, parse_plan

CASES = [
    ("Thought: click File\nAction: click(start_box='(1,2)')",
     ParsedPlan("click File", "click(start_box='(1,2)')", False, None)),
    ("click the File menu", ParsedPlan("click the File menu", None, False, None)),
    ("thought:  lower case\naction: hotkey(key='ctrl s')",
     ParsedPlan("lower case", "hotkey(key='ctrl s')", False, None)),
    ("Thought: all done\nAction: finished()", ParsedPlan("all done", "finished()", True, None)),
    ("Thought: done\nAction: finished(content='ok')",
     ParsedPlan("done", "finished(content='ok')", True, None)),
    ("Thought: done\nAction: DONE", ParsedPlan("done", "DONE", True, None)),
    ("Thought: done\nAction: ```DONE```", ParsedPlan("done", "DONE", True, None)),
    ("Thought: it is 5\nAction: ANS 5", ParsedPlan("it is 5", "ANS 5", True, "5")),
    ("Thought: it is 5\nAction: ```ANS 5```", ParsedPlan("it is 5", "ANS 5", True, "5")),
    ("The value is 42.\n```ANS 42```",
     ParsedPlan("The value is 42.\n```ANS 42```", None, True, "42")),
    ("Answer below\n```\nANS x = 3\n```",
     ParsedPlan("Answer below\n```\nANS x = 3\n```", None, True, "x = 3")),
    ("Thought: two lines\nof thought\nAction: type(content='a')\n",
     ParsedPlan("two lines\nof thought", "type(content='a')", False, None)),
    ("Thought: empty action\nAction:", ParsedPlan("empty action", None, False, None)),
    ("", ParsedPlan("", None, False, None)),
    ("Thought: ANSWER is not ANS\nAction: click(start_box='(3,4)')",
     ParsedPlan("ANSWER is not ANS", "click(start_box='(3,4)')", False, None)),
    ("Thought: finished() is not the action\nAction: wait()",
     ParsedPlan("finished() is not the action", "wait()", False, None)),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_parse_plan(text: str, expected: ParsedPlan) -> None:
    assert parse_plan(text) == expected
