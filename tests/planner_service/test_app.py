"""The planner service as a real process (tiny random Qwen2.5-VL), over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coda.clients.base import ServiceError
from coda.clients.planner import PlannerClient
from coda.contracts.services_api import HistoryStep, ImageRef, PlanRequest, Sampling
from tests.fixtures.images import image_b64
from tests.fixtures.services import RunningService

SMALL = Sampling(temperature=1.0, top_p=0.9, max_tokens=6, seed=0)


def request(**kw: object) -> PlanRequest:
    body: dict[str, object] = {"instruction": "Plot sin(x)",
                               "screenshot": ImageRef(b64=image_b64((56, 56))), "sampling": SMALL}
    body.update(kw)
    return PlanRequest.model_validate(body)


@pytest.fixture
async def planner(planner_service: RunningService) -> AsyncIterator[PlannerClient]:
    async with planner_service.client(PlannerClient) as client:
        yield client


@pytest.fixture
async def admin(planner_service: RunningService) -> AsyncIterator[PlannerClient]:
    async with planner_service.client(PlannerClient, admin=True) as client:
        yield client


async def test_plan_returns_n_samples_tagged_base(planner: PlannerClient) -> None:
    resp = await planner.plan(request(n=4))
    assert len(resp.plans) == 4
    assert {p.version for p in resp.plans} == {"base"}
    assert all(p.prompt_tokens > 0 and 0 < p.completion_tokens <= 6 for p in resp.plans)
    assert resp.latency_ms > 0


async def test_plan_with_history_and_store_keys(planner: PlannerClient,
                                                planner_service: RunningService) -> None:
    keys = planner_service.store.keys
    history = [HistoryStep(thought="Thought: open it\nAction: click(start_box='(1,2)')",
                           screenshot=ImageRef(ref=keys["png"])),
               HistoryStep(thought="Thought: type\nAction: type(content='x')",
                           screenshot=ImageRef(ref=keys["jpeg"]))]
    resp = await planner.plan(request(history=history, n=2, answer_mode=True,
                                      previous_screenshot=ImageRef(ref=keys["webp"])))
    assert len(resp.plans) == 2
    data_url = ImageRef(b64="data:image/png;base64," + image_b64((56, 56)))
    assert len((await planner.plan(request(screenshot=data_url))).plans) == 1


async def test_adapter_lifecycle_from_the_store(planner: PlannerClient, admin: PlannerClient,
                                                planner_service: RunningService) -> None:
    folder = planner_service.store.adapter_folder
    info = await admin.load_adapter("run1:step-10", folder)
    assert info.is_default and info.uri == folder
    try:
        listing = await planner.list_adapters()
        assert [(a.version, a.is_default) for a in listing.items] == [
            ("base", False), ("run1:step-10", True)]
        resp = await planner.plan(request(n=2))
        assert {p.version for p in resp.plans} == {"run1:step-10"}
        resp = await planner.plan(request(n=1, adapter="base"))
        assert resp.plans[0].version == "base"
        with pytest.raises(ServiceError) as err:
            await admin.load_adapter("run1:step-10", "adapters/elsewhere")
        assert err.value.status == 409
    finally:
        await admin.unload_adapter("run1:step-10")
    assert (await planner.plan(request(n=1))).plans[0].version == "base"
    with pytest.raises(ServiceError) as err:
        await admin.unload_adapter("run1:step-10")
    assert err.value.status == 404


async def test_adapter_from_an_adapter_root_in_place(admin: PlannerClient,
                                                     tiny_lora_dir: Path) -> None:
    info = await admin.load_adapter("rooted", str(tiny_lora_dir), make_default=False)
    try:
        assert info.uri == str(tiny_lora_dir) and not info.is_default
    finally:
        await admin.unload_adapter("rooted")


async def test_unknown_adapter_is_404(planner: PlannerClient) -> None:
    with pytest.raises(ServiceError) as err:
        await planner.plan(request(adapter="nope"))
    assert err.value.status == 404
    assert "adapter 'nope' is not loaded" in str(err.value.detail)


async def test_adapter_without_files_is_422(admin: PlannerClient) -> None:
    with pytest.raises(ServiceError) as err:
        await admin.load_adapter("v2", "adapters/missing")
    assert err.value.status == 422
    assert err.value.detail[0]["loc"] == ["body", "uri"]


def _locs(err: ServiceError) -> list[list[object]]:
    return [d["loc"] for d in err.detail]


@pytest.mark.parametrize(("body", "loc"), [
    ({"instruction": "x", "screenshot": {"b64": image_b64()}, "n": 0}, ["body", "n"]),
    ({"instruction": "", "screenshot": {"b64": image_b64()}}, ["body", "instruction"]),
    ({"instruction": "x", "screenshot": {"b64": "%%%"}}, ["body", "screenshot", "b64"]),
    ({"instruction": "x", "screenshot": {"b64": "aGVsbG8="}}, ["body", "screenshot", "b64"]),
    ({"instruction": "x", "screenshot": {"ref": "sha256/00/" + "0" * 64 + ".png"}},
     ["body", "screenshot", "ref"]),
    ({"instruction": "x", "screenshot": {"ref": "../../etc/passwd"}},
     ["body", "screenshot", "ref"]),
    ({"instruction": "x", "screenshot": {"b64": image_b64()},
      "history": [{"thought": "t", "screenshot": {"ref": "nope.png"}}]},
     ["body", "history", 0, "screenshot", "ref"]),
    ({"instruction": "x"}, ["body", "screenshot"]),
])
async def test_bad_input_is_422_naming_the_field(planner: PlannerClient, body: dict,
                                                 loc: list[object]) -> None:
    with pytest.raises(ServiceError) as err:
        await planner.send("POST", "/v1/plan", {**body, "sampling": {"max_tokens": 4}})
    assert err.value.status == 422
    assert loc in _locs(err.value)


async def test_readiness_and_version(planner_service: RunningService) -> None:
    import coda

    async with planner_service.http(token=None) as http:
        ready = await http.get("/readyz")
        spec = (await http.get("/openapi.json")).json()
    assert ready.json()["status"] == "ready"
    assert spec["info"]["version"] == coda.__version__
