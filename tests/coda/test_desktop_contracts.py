"""The desktop contracts shared by the worker and the guest agent."""

from __future__ import annotations

from coda.contracts.desktop import (
    BrokenReason,
    CheckOutcome,
    CheckVerdict,
    DesktopBroken,
    Observation,
    SetupReport,
    SetupStepResult,
    StepStatus,
)


def test_observation_round_trips_through_json_with_binary_image() -> None:
    obs = Observation(image=b"\x89PNG\r\n\x1a\n\x00\xff", width=2, height=1, screen_width=4,
                      screen_height=2, format="png")
    assert Observation.model_validate_json(obs.model_dump_json()) == obs
    assert obs.media_type == "image/png"


def test_outcome_success_is_none_when_the_checkers_cannot_decide() -> None:
    assert CheckOutcome(verdict=CheckVerdict.SUCCESS).success is True
    assert CheckOutcome(verdict=CheckVerdict.FAILURE).success is False
    assert CheckOutcome(verdict=CheckVerdict.UNDECIDED).success is None
    assert CheckOutcome(verdict=CheckVerdict.NO_CHECKER).success is None


def test_setup_report_names_its_first_problem() -> None:
    report = SetupReport(steps=[
        SetupStepResult(index=0, func="touch", status=StepStatus.OK),
        SetupStepResult(index=1, func="teleport", status=StepStatus.UNSUPPORTED, detail="?")])
    assert not report.ok and report.first_problem is not None
    assert report.first_problem.func == "teleport"
    assert SetupReport().ok


def test_desktop_broken_carries_its_typed_reason() -> None:
    err = DesktopBroken(BrokenReason.X_CRASHED, "display :3 gone")
    assert err.reason is BrokenReason.X_CRASHED and str(err) == "x_crashed: display :3 gone"
