"""The judge service end to end on the tiny random model (its replies never parse)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from coda.clients.base import ServiceError
from coda.clients.judge import InstructionCheckRequest, JudgeClient
from coda.contracts.services_api import ImageRef, JudgePolicy, JudgeStep
from tests.fixtures.images import image_b64
from tests.fixtures.services import RunningService

SHOT = (112, 70)


def steps(n: int) -> list[JudgeStep]:
    return [JudgeStep(screenshot=ImageRef(b64=image_b64(SHOT, (20 * i, 40, 90))),
                      thought=f"step {i}", action="click(start_box='(1,1)')") for i in range(n)]


@pytest.fixture
async def judge(judge_service: RunningService) -> AsyncIterator[JudgeClient]:
    async with judge_service.client(JudgeClient) as client:
        yield client


async def test_unparseable_votes_fail_at_low_resolution(judge: JudgeClient) -> None:
    resp = await judge.judge("Plot sin(x)", steps(3), JudgePolicy(votes=3))
    verdict = resp.verdict
    assert verdict.correct is False and verdict.positive_steps == []
    # the low-resolution pass fails, so no high-resolution votes are drawn
    assert sorted((v.model, v.resolution, v.parsed) for v in verdict.votes) == [
        ("a", "low", False), ("b", "low", False)]
    assert all(v.raw is not None for v in verdict.votes)


async def test_high_resolution_votes_in_one_call(judge: JudgeClient) -> None:
    policy = JudgePolicy(votes=3, multi_resolution=False, models=["b"], max_frames=3)
    verdict = (await judge.judge("Plot sin(x)", steps(6), policy)).verdict
    assert verdict.correct is False
    assert [(v.model, v.resolution, v.parsed) for v in verdict.votes] == [("b", "high", False)] * 3


async def test_unknown_model_is_422(judge: JudgeClient) -> None:
    with pytest.raises(ServiceError) as err:
        await judge.judge("x", steps(1), JudgePolicy(models=["c"]))
    assert err.value.status == 422
    assert err.value.detail[0]["loc"] == ["body", "policy", "models"]


@pytest.mark.parametrize(("body", "loc"), [
    ({"instruction": "x", "steps": []}, ["body", "steps"]),
    ({"instruction": "x", "steps": [{"screenshot": {"b64": image_b64(SHOT)}}],
      "policy": {"votes": 0}}, ["body", "policy", "votes"]),
    ({"instruction": "x", "steps": [{"screenshot": {"b64": image_b64(SHOT)}},
                                    {"screenshot": {"b64": "aGVsbG8="}}]},
     ["body", "steps", 1, "screenshot", "b64"]),
    ({"instruction": "x", "steps": [{"screenshot": {"ref": "missing/0.png"}}]},
     ["body", "steps", 0, "screenshot", "ref"]),
    ({"instruction": "x", "steps": [{"screenshot": {"ref": f"sha256/ab/{'ab' * 32}.png"}}]},
     ["body", "steps", 0, "screenshot", "ref"]),
])
async def test_bad_input_is_422_naming_the_field(judge: JudgeClient, body: dict,
                                                 loc: list[object]) -> None:
    with pytest.raises(ServiceError) as err:
        await judge.send("POST", "/v1/judge", body)
    assert err.value.status == 422
    assert loc in [d["loc"] for d in err.value.detail]


async def test_instruction_check_unparsed_is_not_ok(judge: JudgeClient,
                                                    judge_service: RunningService) -> None:
    for screenshot in (ImageRef(b64=image_b64(SHOT)),
                       ImageRef(ref=judge_service.store.keys["jpeg"])):
        check = await judge.check_instruction(InstructionCheckRequest(
            instruction="Plot sin(x) in the 2D view", app="KAlgebra", screenshot=screenshot))
        assert check.parsed is False and check.ok is False and isinstance(check.raw, str)


async def test_steps_from_the_store(judge: JudgeClient, judge_service: RunningService) -> None:
    keys = judge_service.store.keys
    frames = [JudgeStep(screenshot=ImageRef(ref=keys[k])) for k in ("png", "jpeg", "webp")]
    verdict = (await judge.judge("Plot", frames, JudgePolicy(votes=1, models=["a"]))).verdict
    assert verdict.correct is False and len(verdict.votes) == 1
