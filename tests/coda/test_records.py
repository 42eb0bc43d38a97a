"""The typed step record: no free dict, no default that hides a missing value."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from coda.contracts.records import PlanRecord, ScreenSize, Step, StepLabel, StepTimings
from coda.contracts.training import StateRef

KEY = "sha256/ab/" + "a" * 64 + ".png"


def test_a_step_with_a_screenshot_names_its_screen_size() -> None:
    with pytest.raises(ValidationError, match="screen: required with a screenshot"):
        Step(index=0, screenshot=KEY)
    step = Step(index=0, screenshot=KEY, screen=ScreenSize(width=1920, height=1080))
    assert step.screen == ScreenSize(width=1920, height=1080)
    assert Step(index=0).screen is None  # no screenshot, nothing to size


def test_the_free_extra_dict_is_gone_and_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="extra"):
        Step.model_validate({"index": 0, "extra": {"screen": {"width": 1, "height": 1}}})
    with pytest.raises(ValidationError):
        ScreenSize.model_validate({"width": 10, "height": 10, "depth": 24})


def test_plan_and_timings_have_no_hidden_defaults() -> None:
    with pytest.raises(ValidationError) as err:
        PlanRecord.model_validate({"thought": "t"})
    missing = {e["loc"][0] for e in err.value.errors() if e["type"] == "missing"}
    assert missing == {"action_hint", "finished", "answer", "answer_mode", "completion_tokens"}
    with pytest.raises(ValidationError):
        StepTimings.model_validate({"total": 1.0})
    with pytest.raises(ValidationError):
        StateRef.model_validate({"step_index": 0, "instruction": "i", "app": "a",
                                 "screenshot": KEY})  # the screen size is no longer 1280x800


def test_a_step_round_trips_through_json() -> None:
    step = Step(index=3, screenshot=KEY, screen=ScreenSize(width=1280, height=800),
                plan=PlanRecord(thought="t", action_hint="FAIL", finished=False, answer=None,
                                answer_mode=True, completion_tokens=12),
                timings=StepTimings(observe=1, upload=2, plan=3, plan_model=2, execute=0,
                                    execute_model=0, act=0, settle=0, report=1, total=7,
                                    overhead=5),
                label=StepLabel.POSITIVE)
    assert Step.model_validate_json(step.model_dump_json()) == step
