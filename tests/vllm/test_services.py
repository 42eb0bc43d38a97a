"""The planner, executor and judge services against vLLM's own server (CPU build, tiny
Qwen2.5-VL served as one model for the three roles), in process over ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from coda.contracts.services_api import (
    ActBatchResponse,
    ActResult,
    ImageRef,
    JudgePolicy,
    JudgeRequest,
    JudgeResponse,
    JudgeStep,
    PlanRequest,
    PlanResponse,
    Sampling,
)
from coda.inference.base import ChatMessage, Completion, GenerateOptions
from coda.inference.openai_compat import OpenAICompatBackend
from tests.fixtures.images import image_b64
from tests.fixtures.services import TOKENS, Store, asgi_client
from tests.vllm.conftest import SERVED_NAME, VllmServer

pytestmark = pytest.mark.vllm


@pytest.fixture
async def planner(vllm_url: str, service_store: Store, tmp_path: Path,
                  ) -> AsyncIterator[httpx.AsyncClient]:
    from planner_service.app import create_app
    from planner_service.settings import PlannerSettings

    settings = PlannerSettings(
        backend="openai", base_url=f"{vllm_url}/v1", model=SERVED_NAME, backend_retries=1,
        backend_timeout_s=60, artifacts_url=str(service_store.root),
        adapter_cache_dir=str(tmp_path / "adapter-cache"), **TOKENS.env())
    async with asgi_client(create_app(settings)) as http:
        yield http


def plan_request(n: int, seed: int = 0) -> dict[str, object]:
    return PlanRequest(instruction="Plot sin(x)", screenshot=ImageRef(b64=image_b64((112, 84))),
                       n=n, sampling=Sampling(temperature=1.0, max_tokens=8, seed=seed),
                       return_logprobs=True).model_dump(mode="json", exclude_none=True)


async def test_planner_g_plans_in_one_request_with_logprobs(planner: httpx.AsyncClient) -> None:
    resp = await planner.post("/v1/plan", json=plan_request(8))
    assert resp.status_code == 200, resp.text
    plans = PlanResponse.model_validate(resp.json()).plans
    assert len(plans) == 8 and {p.version for p in plans} == {"base"}
    for p in plans:
        assert p.token_ids and p.logprobs and len(p.token_ids) == len(p.logprobs)
        assert p.completion_tokens == len(p.token_ids)
    backend = planner._transport.app.state.model.backends["planner"]  # type: ignore[attr-defined]
    assert backend.honours_n is True  # one request for the 8 plans


async def test_planner_adapter_versions_on_vllm(planner: httpx.AsyncClient,
                                                service_store: Store) -> None:
    admin = {"authorization": f"Bearer {TOKENS.admin}"}
    resp = await planner.post("/v1/adapters", headers=admin,
                              json={"version": "grpo-7", "uri": service_store.adapter_folder})
    assert resp.status_code == 201, resp.text
    try:
        plans = PlanResponse.model_validate(
            (await planner.post("/v1/plan", json=plan_request(2))).json()).plans
        assert {p.version for p in plans} == {"grpo-7"}
        listing = (await planner.get("/v1/adapters")).json()
        assert "grpo-7" in [a["version"] for a in listing["items"]]
        missing = await planner.post("/v1/adapters", headers=admin,
                                     json={"version": "grpo-8", "uri": "adapters/none"})
        assert missing.status_code == 422
    finally:
        resp = await planner.delete("/v1/adapters/grpo-7", headers=admin)
        assert resp.status_code in (200, 204), resp.text
    plans = PlanResponse.model_validate(
        (await planner.post("/v1/plan", json=plan_request(1))).json()).plans
    assert plans[0].version == "base"


class ConstrainedBackend:
    """vLLM's backend with the executor's output held to one action by vLLM's structured
    outputs (a random model's text never parses): the server still continues the pre-fill."""

    name = "openai"

    def __init__(self, inner: OpenAICompatBackend) -> None:
        self.inner = inner

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions,
                   ) -> list[Completion]:
        assert options.continue_final_message  # the executor's pre-fill
        extra = {**options.extra, "structured_outputs": {"regex": CLICK_REGEX}}
        return await self.inner.chat(messages, replace(options, extra=extra))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


CLICK_REGEX = r"click\(start_box='\([1-9][0-9]{1,2},[1-9][0-9]{1,2}\)'\)"


async def test_executor_prefill_continuation_is_parsed(vllm_url: str) -> None:
    from executor_service.app import create_app
    from executor_service.settings import ExecutorSettings

    settings = ExecutorSettings(backend="openai", base_url=f"{vllm_url}/v1", model=SERVED_NAME,
                                **TOKENS.env())
    inner = OpenAICompatBackend(f"{vllm_url}/v1", model=SERVED_NAME, retries=1)
    async with asgi_client(create_app(settings, backend=ConstrainedBackend(inner))) as http:
        body = {"instruction": "Open the File menu", "thought": "click the File menu",
                "screenshot": {"b64": image_b64((320, 200))},
                "screen_width": 320, "screen_height": 200,
                "sampling": {"temperature": 1.0, "max_tokens": 24, "seed": 1}}
        single = await http.post("/v1/act", json=body)
        batch = await http.post("/v1/act/batch", json={
            **{k: v for k, v in body.items() if k != "thought"},
            "thoughts": ["click File", "click Edit", "click View"]})
    await inner.aclose()
    assert single.status_code == 200, single.text
    result = ActResult.model_validate(single.json())
    assert result.error is None and result.action is not None, result
    assert result.action.type == "click" and result.pyautogui
    assert result.raw.startswith("click(start_box=")
    assert batch.status_code == 200, batch.text
    results = ActBatchResponse.model_validate(batch.json()).results
    assert len(results) == 3 and all(r.action is not None for r in results)


def judge_steps(n: int, size: tuple[int, int]) -> list[JudgeStep]:
    return [JudgeStep(screenshot=ImageRef(b64=image_b64(size, (20 * i % 255, 40, 90))),
                      thought=f"step {i}", action="click(start_box='(1,1)')") for i in range(n)]


@pytest.fixture
async def judge(vllm_url: str) -> AsyncIterator[httpx.AsyncClient]:
    from judge_service.app import create_app
    from judge_service.settings import JudgeModelSpec, JudgeSettings

    spec = JudgeModelSpec(name="tiny", backend="openai", base_url=f"{vllm_url}/v1",
                          model=SERVED_NAME, backend_retries=1, backend_timeout_s=60)
    settings = JudgeSettings(models=[spec], max_tokens=8, **TOKENS.env())
    async with asgi_client(create_app(settings)) as http:
        yield http


async def test_judge_k_votes_in_one_request(judge: httpx.AsyncClient) -> None:
    req = JudgeRequest(instruction="Plot sin(x)", steps=judge_steps(3, (320, 200)),
                       policy=JudgePolicy(votes=4, multi_resolution=False))
    resp = await judge.post("/v1/judge", json=req.model_dump(mode="json"))
    assert resp.status_code == 200, resp.text
    verdict = JudgeResponse.model_validate(resp.json()).verdict
    assert [(v.model, v.resolution) for v in verdict.votes] == [("tiny", "high")] * 4
    [shown] = verdict.inputs
    assert shown.steps == [1, 2, 3] and not shown.reduced and shown.refusals == 0


async def test_judge_fits_a_long_trajectory_into_the_context(judge: httpx.AsyncClient) -> None:
    """10 screenshots at 1280x800 are ~10,000 tokens, the server's context 4,096: the judge
    lowers the resolution (then the frames) until vLLM takes it, and says what it sent."""
    req = JudgeRequest(instruction="Plot sin(x)", steps=judge_steps(10, (1280, 800)),
                       policy=JudgePolicy(votes=2, multi_resolution=False))
    resp = await judge.post("/v1/judge", json=req.model_dump(mode="json"))
    assert resp.status_code == 200, resp.text
    verdict = JudgeResponse.model_validate(resp.json()).verdict
    [shown] = verdict.inputs
    assert shown.reduced and shown.refusals >= 1 and shown.max_pixels is not None
    assert shown.steps[0] == 1 and shown.steps[-1] == 10
    assert len(verdict.votes) == 2


async def test_judge_a_trajectory_that_never_fits_is_413(judge: httpx.AsyncClient) -> None:
    req = JudgeRequest(instruction="Plot sin(x) " * 3000, steps=judge_steps(2, (320, 200)),
                       policy=JudgePolicy(votes=1, multi_resolution=False))
    resp = await judge.post("/v1/judge", json=req.model_dump(mode="json"))
    assert resp.status_code == 413, resp.text
    assert resp.json()["detail"][0]["type"] == "prompt_too_long"


async def test_a_killed_server_is_retried_then_a_typed_failure_then_recovers(
        planner: httpx.AsyncClient, vllm_server: VllmServer) -> None:
    """kill -9 of vLLM: the planner retries, then answers 502 (a typed failure the worker
    retries later, nothing recorded); once vLLM is back the same request succeeds."""
    vllm_server.kill()
    try:
        resp = await planner.post("/v1/plan", json=plan_request(2))
        assert resp.status_code == 502, resp.text
        assert "after 2 attempts" in resp.json()["detail"]
    finally:
        vllm_server.start()
    resp = await planner.post("/v1/plan", json=plan_request(2))
    assert resp.status_code == 200, resp.text
