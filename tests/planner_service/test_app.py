"""The planner service over HTTP on the tiny random Qwen2.5-VL."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda.clients.base import ServiceError
from coda.clients.planner import PlannerClient
from coda.contracts.services_api import HistoryStep, ImageRef, PlanRequest, Sampling
from tests.planner_service.conftest import png_b64

SMALL = Sampling(temperature=1.0, top_p=0.9, max_tokens=6, seed=0)


def request(**kw: object) -> PlanRequest:
    body: dict[str, object] = {"instruction": "Plot sin(x)", "screenshot": ImageRef(b64=png_b64()),
                               "sampling": SMALL}
    body.update(kw)
    return PlanRequest.model_validate(body)


async def test_plan_returns_n_samples_tagged_base(planner: PlannerClient) -> None:
    resp = await planner.plan(request(n=4))
    assert len(resp.plans) == 4
    assert {p.version for p in resp.plans} == {"base"}
    assert all(p.prompt_tokens > 0 and 0 < p.completion_tokens <= 6 for p in resp.plans)
    assert resp.latency_ms > 0


async def test_plan_with_history_and_artifact_refs(planner: PlannerClient,
                                                   screenshot_key: str,
                                                   artifacts_dir: Path) -> None:
    history = [HistoryStep(thought="Thought: open it\nAction: click(start_box='(1,2)')",
                           screenshot=ImageRef(ref=screenshot_key)),
               HistoryStep(thought="Thought: type\nAction: type(content='x')")]
    resp = await planner.plan(request(history=history, n=2, answer_mode=True,
                                      previous_screenshot=ImageRef(ref=screenshot_key)))
    assert len(resp.plans) == 2
    full_url = ImageRef(ref=f"file://{artifacts_dir}/{screenshot_key}")
    assert len((await planner.plan(request(screenshot=full_url))).plans) == 1


async def test_adapter_lifecycle(planner: PlannerClient, tiny_lora_dir: Path) -> None:
    info = await planner.load_adapter("run1:step-10", str(tiny_lora_dir))
    assert info.is_default and info.uri == str(tiny_lora_dir)
    try:
        listing = await planner.list_adapters()
        assert [(a.version, a.is_default) for a in listing.items] == [
            ("base", False), ("run1:step-10", True)]
        resp = await planner.plan(request(n=2))
        assert {p.version for p in resp.plans} == {"run1:step-10"}
        resp = await planner.plan(request(n=1, adapter="base"))
        assert resp.plans[0].version == "base"
        with pytest.raises(ServiceError) as err:
            await planner.load_adapter("run1:step-10", "/elsewhere")
        assert err.value.status == 409
    finally:
        await planner.unload_adapter("run1:step-10")
    resp = await planner.plan(request(n=1))
    assert resp.plans[0].version == "base"
    with pytest.raises(ServiceError) as err:
        await planner.unload_adapter("run1:step-10")
    assert err.value.status == 404


async def test_unknown_adapter_is_404(planner: PlannerClient) -> None:
    with pytest.raises(ServiceError) as err:
        await planner.plan(request(adapter="nope"))
    assert err.value.status == 404
    assert "adapter 'nope' is not loaded" in str(err.value.detail)


async def test_adapter_without_files_is_422(planner: PlannerClient, tmp_path: Path) -> None:
    with pytest.raises(ServiceError) as err:
        await planner.load_adapter("v2", str(tmp_path / "missing"))
    assert err.value.status == 422
    assert err.value.detail[0]["loc"] == ["body", "uri"]


def _locs(err: ServiceError) -> list[list[object]]:
    return [d["loc"] for d in err.detail]


@pytest.mark.parametrize(("body", "loc"), [
    ({"instruction": "x", "screenshot": {"b64": png_b64()}, "n": 0}, ["body", "n"]),
    ({"instruction": "", "screenshot": {"b64": png_b64()}}, ["body", "instruction"]),
    ({"instruction": "x", "screenshot": {"b64": "%%%"}}, ["body", "screenshot", "b64"]),
    ({"instruction": "x", "screenshot": {"b64": "aGVsbG8="}}, ["body", "screenshot", "b64"]),
    ({"instruction": "x", "screenshot": {"ref": "sha256/00/" + "0" * 64 + ".png"}},
     ["body", "screenshot", "ref"]),
    ({"instruction": "x", "screenshot": {"ref": "../../etc/passwd"}},
     ["body", "screenshot", "ref"]),
    ({"instruction": "x", "screenshot": {"b64": png_b64()},
      "history": [{"thought": "t", "screenshot": {"ref": "nope.png"}}]},
     ["body", "history", 0, "screenshot", "ref"]),
    ({"instruction": "x"}, ["body", "screenshot"]),
])
async def test_bad_input_is_422_naming_the_field(planner: PlannerClient, body: dict,
                                                 loc: list[object]) -> None:
    with pytest.raises(ServiceError) as err:
        await planner.send("POST", "/v1/plan", body)
    assert err.value.status == 422
    assert loc in _locs(err.value)


async def test_readiness(planner: PlannerClient) -> None:
    resp = await planner.send("GET", "/readyz")
    assert resp.json()["status"] == "ready"
