"""The rule-based judge (issue 37, point 2): redundancy from the frames and the actions, a first
error where a failed trajectory shows one, correctness from the task's checker; and the judge
service's real route voting with it, alone and beside a model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest
from PIL import Image, ImageDraw

from coda.contracts.services_api import (
    ImageRef,
    JudgePolicy,
    JudgeRequest,
    JudgeResponse,
    JudgeStep,
)
from coda.contracts.training import LabelRule
from judge_service.parsing import parse_vote
from judge_service.rules import (
    GRID,
    action_kind,
    changed_cells,
    first_error,
    normalized_action,
    redundant_steps,
    rule_verdict,
    screen_changed,
)
from judge_service.settings import JudgeModelSpec, JudgeSettings
from tests.fixtures.images import image_b64
from tests.fixtures.services import TOKENS, asgi_client

SIZE = (1280, 800)
CLICK = "Thought: open the menu\nAction: click(start_box='(10,10)')"


def screen(boxes: int = 0, *, caret: bool = False, shift: int = 0) -> Image.Image:
    """A desktop-like frame: a window with ``boxes`` dialog boxes drawn in."""
    image = Image.new("RGB", SIZE, (236, 236, 236))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, SIZE[0], 30), fill=(50, 60, 80))
    for k in range(boxes):
        draw.rectangle((100 + 200 * k, 200, 260 + 200 * k, 320), fill=(255, 255, 255),
                       outline=(0, 0, 0))
    if caret:
        draw.line((640, 400, 640, 416), fill=(0, 0, 0), width=2)
    if shift:
        draw.rectangle((0, 700, shift, 702), fill=(236, 236, 237))  # below the tolerance
    return image


def shot(k: int) -> str:
    """Screen ``k`` of a trajectory as the service gets it: one grey level per screen."""
    grey = 236 - 40 * k
    return image_b64(SIZE, (grey, grey, grey))


# -- frames ----------------------------------------------------------------------------------


def test_frames_that_change_and_frames_that_do_not() -> None:
    assert not screen_changed(screen(), screen())
    assert not screen_changed(screen(), screen(shift=400)), "a grey level of noise is no change"
    assert screen_changed(screen(), screen(1)), "a dialog opened"
    assert screen_changed(screen(1), screen(2))
    assert screen_changed(screen(), screen(caret=True)), "even a caret counts: never over-call"
    assert screen_changed(screen(), screen().resize((1920, 1080)))
    assert changed_cells(screen(), screen().resize((1920, 1080))) == GRID[0] * GRID[1]
    assert 0 < changed_cells(screen(), screen(1)) < GRID[0] * GRID[1] // 10


# -- actions ---------------------------------------------------------------------------------


def test_actions_are_compared_by_what_they_do_not_by_the_thought() -> None:
    assert normalized_action(CLICK) == normalized_action(
        "Thought: something else\nAction:   click(start_box='(10,10)') ")
    assert normalized_action('{"type": "done"}') == '{"type": "done"}'
    assert normalized_action("  ") is None and normalized_action(None) is None
    assert action_kind(normalized_action(CLICK)) == "click"
    assert action_kind('{"type": "answer", "text": "42"}') == "answer"
    assert action_kind("scroll(start_box='(1,1)', direction='down')") == "scroll"
    assert action_kind("finished(content='ok')") == "finished"


def test_a_step_that_repeats_the_previous_action_is_redundant() -> None:
    click = normalized_action(CLICK)
    other = "type(content='x')"
    assert redundant_steps([True, True, True, None], [click, click, other, other]) == [2, 4]
    # repeating a scroll or a key press is how one goes further: not redundant by itself
    scroll, down = "scroll(start_box='(1,1)', direction='down')", "press(key='down')"
    assert redundant_steps([True, True, True, None], [scroll, scroll, down, down]) == []
    # ... unless the screen stayed as it was
    assert redundant_steps([True, False, True, None], [scroll, scroll, down, down]) == [2]
    # a step with no action and no change is redundant by its frame
    assert redundant_steps([False, True, None], [None, click, other]) == [1]
    with pytest.raises(ValueError):
        redundant_steps([True], [click, click])


# -- first error and the checker ---------------------------------------------------------


def test_first_error_only_where_a_failed_trajectory_shows_one() -> None:
    click, done = normalized_action(CLICK), '{"type":"done"}'
    assert first_error([click, None, click], correct=False) == (2, "no_action")
    assert first_error([click, click, done], correct=False) == (3, "wrong_completion")
    assert first_error(["type(content='x')", "finished(content='ok')"], correct=False) == (
        2, "wrong_completion")
    assert first_error([click, click], correct=False) == (None, None), "nothing to point at"
    assert first_error([click, None, done], correct=True) == (None, None)
    assert first_error([click, None], correct=None) == (None, None)


@pytest.mark.parametrize("checker", [True, False])
def test_correctness_is_the_checkers_verdict(checker: bool) -> None:
    verdict = rule_verdict([True, True, None], [CLICK, "type(content='x')", '{"type":"done"}'],
                           checker)
    vote = parse_vote(verdict.answer(), model="rules")
    assert vote.parsed and vote.correctness is checker and vote.redundant == []
    assert vote.first_error_step == (None if checker else 3)
    assert ("passed" if checker else "failed") in json.loads(verdict.answer())["Reason"]


def test_without_a_checker_verdict_the_vote_is_a_failed_vote() -> None:
    verdict = rule_verdict([False, None], [CLICK, CLICK], None)
    answer = json.loads(verdict.answer())
    assert "Correctness" not in answer and answer["Redundant"] == [1, 2]
    assert parse_vote(verdict.answer(), model="rules").parsed is False


# -- the service -------------------------------------------------------------------------


RULES = JudgeModelSpec.model_validate({"name": "rules", "backend": "rules"})


def rules_settings(**over: object) -> JudgeSettings:
    return JudgeSettings(models=[RULES], **{**TOKENS.env(), **over})


@pytest.fixture
async def rules_judge() -> AsyncIterator[httpx.AsyncClient]:
    from judge_service.app import create_app

    async with asgi_client(create_app(rules_settings())) as http:
        yield http


def request(frames: Sequence[int], actions: Sequence[str | None], checker: bool | None,
            **policy: object) -> dict[str, object]:
    steps = [JudgeStep(screenshot=ImageRef(b64=shot(f)), thought=f"step {i}", action=a)
             for i, (f, a) in enumerate(zip(frames, actions, strict=True))]
    return JudgeRequest(instruction="Open the dialogs", steps=steps, checker_success=checker,
                        policy=JudgePolicy(**policy)).model_dump(mode="json")


async def judged(http: httpx.AsyncClient, body: dict[str, object]) -> JudgeResponse:
    resp = await http.post("/v1/judge", json=body)
    assert resp.status_code == 200, resp.text
    return JudgeResponse.model_validate(resp.json())


async def test_a_clean_success_is_labelled_in_full_through_the_route(
        rules_judge: httpx.AsyncClient) -> None:
    frames = [0, 1, 2]
    body = request(frames, [CLICK, "click(start_box='(20,20)')", '{"type":"done"}'], True,
                   votes=3)
    verdict = (await judged(rules_judge, body)).verdict
    assert verdict.correct and verdict.redundant == [] and verdict.first_error_step is None
    assert verdict.positive_steps == [0, 1, 2]
    # the service's voting: a low-resolution vote, then k votes, every one the rule's answer
    assert [(v.model, v.resolution, v.parsed) for v in verdict.votes] == [
        ("rules", "low", True), *[("rules", "high", True)] * 3]
    [shown] = verdict.inputs
    assert shown.model == "rules" and shown.steps == [1, 2, 3] and not shown.reduced


async def test_a_redundant_step_voids_a_success_under_codas_rule(
        rules_judge: httpx.AsyncClient) -> None:
    frames = [0, 1, 1, 2]
    actions = [CLICK, "click(start_box='(20,20)')", "click(start_box='(30,30)')",
               '{"type":"done"}']
    verdict = (await judged(rules_judge, request(frames, actions, True))).verdict
    assert verdict.correct and verdict.redundant == [2] and verdict.positive_steps == []
    seagent = (await judged(rules_judge, request(frames, actions, True,
                                                 label_rule=LabelRule.BEFORE_FIRST_ERROR)))
    assert seagent.verdict.positive_steps == [0]


async def test_a_failure_names_its_first_error(rules_judge: httpx.AsyncClient) -> None:
    frames = [0, 1, 2, 3]
    actions = [CLICK, "click(start_box='(20,20)')", None, '{"type":"done"}']
    body = request(frames, actions, False, label_rule=LabelRule.BEFORE_FIRST_ERROR)
    verdict = (await judged(rules_judge, body)).verdict
    assert not verdict.correct and verdict.first_error_step == 3
    assert verdict.error_type == "no_action" and verdict.positive_steps == [0, 1]
    # a failed first vote stops the voting (the low-resolution pass), as for a model
    assert [(v.resolution, v.correctness) for v in verdict.votes] == [("low", False)]


async def test_no_checker_verdict_is_not_correct(rules_judge: httpx.AsyncClient) -> None:
    body = request([0, 1], [CLICK, '{"type":"done"}'], None,
                   multi_resolution=False, votes=2)
    verdict = (await judged(rules_judge, body)).verdict
    assert not verdict.correct and verdict.positive_steps == []
    assert [v.parsed for v in verdict.votes] == [False, False]


async def test_the_rules_answer_no_conversation(rules_judge: httpx.AsyncClient) -> None:
    resp = await rules_judge.post("/v1/instructions/check",
                                  json={"instruction": "Plot sin(x)", "app": "KAlgebra"})
    assert resp.status_code == 422, resp.text
    assert "rule-based judge" in resp.text


async def test_beside_a_model_both_vote(tiny_model_dir: Path) -> None:
    """An ensemble of the rules and a (tiny, random) model: the model loads, the rules are
    there at once, and the ensemble passes only if both pass."""
    from judge_service.app import create_app

    model = JudgeModelSpec(name="tiny", backend="transformers", model=str(tiny_model_dir),
                           max_pixels=56 * 56)
    settings = JudgeSettings(models=[RULES, model], max_tokens=8, **TOKENS.env())
    async with asgi_client(create_app(settings)) as http:
        body = request([0, 1], [CLICK, '{"type":"done"}'], True,
                       multi_resolution=False, votes=1)
        verdict = (await judged(http, body)).verdict
    assert {v.model for v in verdict.votes} == {"rules", "tiny"}
    assert [v.correctness for v in verdict.votes if v.model == "rules"] == [True]
    assert not verdict.correct, "the random model's reply does not parse: the ensemble fails"
    assert [i.model for i in verdict.inputs] == ["rules", "tiny"]


def test_a_rules_entry_needs_no_model() -> None:
    spec = JudgeModelSpec.model_validate({"name": "r", "backend": "rules"})
    assert spec.is_rules and spec.model == "rules"
    assert not JudgeModelSpec(name="m", backend="openai", base_url="http://x",
                              model="m").is_rules
