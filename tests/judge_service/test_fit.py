"""The judge fits a trajectory into the model's context: lower resolutions first, then fewer
frames; only what does not fit at the smallest setting is a 413 (the tiny model on the
transformers backend with a small context; tests/vllm/ does the same against vLLM)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from coda.contracts.services_api import (
    ImageRef,
    JudgePolicy,
    JudgeRequest,
    JudgeResponse,
    JudgeStep,
)
from coda.inference.openai_compat import context_refusal
from judge_service.judging import FIT_PIXELS, Fit, fit_ladder
from tests.fixtures.images import image_b64
from tests.fixtures.services import TOKENS, asgi_client

# The judge prompt of 3 steps is ~1,000 text tokens for the tiny tokenizer, a 1280x800 frame
# ~1,300 vision tokens at full resolution and ~60 at the smallest setting.
CONTEXT = 1400


def test_the_ladder_lowers_resolution_then_frames() -> None:
    ladder = fit_ladder(16, None)
    assert ladder[:4] == [Fit(16, None), *(Fit(16, p) for p in FIT_PIXELS)]
    assert [f.max_frames for f in ladder[4:]] == [8, 4, 2]
    assert {f.max_pixels for f in ladder[4:]} == {FIT_PIXELS[-1]}
    # a configured bound below a ladder step skips the steps that are not lower
    assert fit_ladder(3, 300_000) == [Fit(3, 300_000), Fit(3, 200_704), Fit(3, 50_176),
                                      Fit(2, 50_176)]
    assert fit_ladder(2, 10_000) == [Fit(2, 10_000)]


@pytest.mark.parametrize(("text", "prompt", "context"), [
    ("Input length (8185) exceeds model's maximum context length (4096).", 8185, 4096),
    ("This model's maximum context length is 4096 tokens. However, you requested 9000 tokens",
     9000, 4096),
    ("The decoder prompt (length 5000) is longer than the maximum model length of 4096.",
     5000, 4096),
])
def test_vllm_context_refusals_are_recognised(text: str, prompt: int, context: int) -> None:
    refusal = context_refusal(text, 16)
    assert refusal is not None
    assert (refusal.prompt_tokens, refusal.max_tokens, refusal.context) == (prompt, 16, context)
    assert context_refusal("The lora adapter 'x' cannot be found.", 16) is None


@pytest.fixture
async def judge(tiny_model_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    from judge_service.app import create_app
    from judge_service.settings import JudgeModelSpec, JudgeSettings

    spec = JudgeModelSpec(name="tiny", backend="transformers", model=str(tiny_model_dir),
                          context_tokens=CONTEXT)
    async with asgi_client(create_app(JudgeSettings(models=[spec], max_tokens=8,
                                                    **TOKENS.env()))) as http:
        yield http


def request(n: int, instruction: str = "Plot sin(x)") -> dict[str, object]:
    steps = [JudgeStep(screenshot=ImageRef(b64=image_b64((1280, 800), (20 * i, 40, 90))),
                       thought=f"step {i}", action="click(start_box='(1,1)')") for i in range(n)]
    return JudgeRequest(instruction=instruction, steps=steps,
                        policy=JudgePolicy(votes=1, multi_resolution=False)).model_dump(mode="json")


async def test_lower_resolution_then_fewer_frames(judge: httpx.AsyncClient) -> None:
    resp = await judge.post("/v1/judge", json=request(3))
    assert resp.status_code == 200, resp.text
    [shown] = JudgeResponse.model_validate(resp.json()).verdict.inputs
    assert (shown.model, shown.steps, shown.max_pixels) == ("tiny", [1, 2, 3], FIT_PIXELS[-1])
    assert shown.reduced and shown.refusals == len(FIT_PIXELS)

    resp = await judge.post("/v1/judge", json=request(10))
    assert resp.status_code == 200, resp.text
    [shown] = JudgeResponse.model_validate(resp.json()).verdict.inputs
    assert shown.max_pixels == FIT_PIXELS[-1] and shown.refusals > len(FIT_PIXELS)
    assert 2 <= len(shown.steps) < 10 and shown.steps[0] == 1 and shown.steps[-1] == 10


async def test_what_never_fits_is_a_clear_413(judge: httpx.AsyncClient) -> None:
    resp = await judge.post("/v1/judge", json=request(2, "Plot sin(x) " * 400))
    assert resp.status_code == 413, resp.text
    [detail] = resp.json()["detail"]
    assert detail["type"] == "prompt_too_long" and detail["loc"] == ["body", "instruction"]
    assert "context of 1400 tokens" in detail["msg"]
