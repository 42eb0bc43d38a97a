"""The model services' contracts keep hostile input out on their own (also for callers in
process, without the HTTP kit): no NUL or lone surrogate in any string, bounded texts and
lists, a 64-bit seed, adapter names of a safe alphabet, screenshot refs that are store keys."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from coda.contracts.services_api import (
    MAX_SEED,
    ActBatchRequest,
    AdapterLoad,
    HistoryStep,
    ImageRef,
    InstructionCheckRequest,
    JudgePolicy,
    JudgeRequest,
    PlanRequest,
    Sampling,
)

SHOT = {"b64": "aGk="}
KEY = f"sha256/ab/{'ab' * 32}.png"


@pytest.mark.parametrize(("model", "body", "loc"), [
    (PlanRequest, {"instruction": "a\ud800b", "screenshot": SHOT}, ("instruction",)),
    (PlanRequest, {"instruction": "a\x00b", "screenshot": SHOT}, ("instruction",)),
    (HistoryStep, {"thought": "\udfff"}, ("thought",)),
    (PlanRequest, {"instruction": "x", "screenshot": SHOT, "adapter": "v\ud800"}, ("adapter",)),
    (PlanRequest, {"instruction": "x", "screenshot": SHOT, "adapter": "v 1"}, ("adapter",)),
    (AdapterLoad, {"version": "v1", "uri": "adapters/\ud800"}, ("uri",)),
    (AdapterLoad, {"version": "v1", "uri": "a\x00"}, ("uri",)),
    (ActBatchRequest, {"instruction": "x", "thoughts": ["ok", "\x00"], "screenshot": SHOT},
     ("thoughts", 1)),
    (JudgeRequest, {"instruction": "x", "steps": [{"screenshot": SHOT, "action": "\ud800"}]},
     ("steps", 0, "action")),
    (InstructionCheckRequest, {"instruction": "x", "app": "\x00"}, ("app",)),
    (ImageRef, {"b64": "\ud800"}, ("b64",)),
])
def test_unstorable_strings_are_refused(model: type[BaseModel], body: dict[str, Any],
                                        loc: tuple[object, ...]) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    assert info.value.errors()[0]["loc"] == loc


@pytest.mark.parametrize(("seed", "ok"), [(0, True), (MAX_SEED, True), (2**64, False),
                                          (10**30, False), (-1, False)])
def test_seed_is_64_bit(seed: int, ok: bool) -> None:
    if ok:
        assert Sampling(seed=seed).seed == seed
    else:
        with pytest.raises(ValidationError):
            Sampling(seed=seed)


@pytest.mark.parametrize("ref", [KEY, KEY.replace(".png", ".jpg"), KEY.replace(".png", ".webp")])
def test_refs_are_screenshot_keys(ref: str) -> None:
    assert ImageRef(ref=ref).ref == ref


@pytest.mark.parametrize("ref", [KEY.replace(".png", ".json"), "a.png", "http://x/y.png"])
def test_other_refs_are_refused(ref: str) -> None:
    with pytest.raises(ValidationError):
        ImageRef(ref=ref)


def test_bounds() -> None:
    with pytest.raises(ValidationError):
        PlanRequest(instruction="x" * 65_537, screenshot=ImageRef(b64="x"))
    with pytest.raises(ValidationError):
        PlanRequest(instruction="x", screenshot=ImageRef(b64="x"),
                    history=[HistoryStep(thought="t")] * 257)
    with pytest.raises(ValidationError):
        JudgePolicy(low_resolution=(10, 10_000))
    with pytest.raises(ValidationError):
        JudgePolicy(models=["m"] * 17)
