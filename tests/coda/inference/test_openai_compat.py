"""The OpenAI-compatible backend against a real `transformers serve` (transformers 5.23).

What `transformers serve` lacks compared with vLLM, and how the backend copes:

* ``n`` is accepted but ignored (one choice per response): the backend requests the missing
  choices concurrently, one per request, and then sends every sample that way.
* No pre-fill: it always renders with ``add_generation_prompt=True`` and rejects the vLLM
  fields ``continue_final_message`` / ``add_generation_prompt`` with 422 ("Unexpected fields").
* No LoRA: there are no ``/v1/load_lora_adapter`` / ``/v1/unload_lora_adapter`` routes (404),
  and a server pinned to one model refuses any other ``model`` (400).
* ``/v1/models`` lists the HF cache, not the pinned model (an empty list here).
* It cannot start without torchvision unless the processor work-around of
  ``coda.inference.encoding`` is applied first (the fixture launches the CLI so).

vLLM itself (n, log-probs, pre-fill, runtime LoRA and its status codes, the context refusal)
is tested against its own server in tests/vllm/. What a real server cannot show on demand, a
server failing a request and then answering (503 then 200, 429 with Retry-After), is
exercised against a small ASGI app here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from PIL import Image

from coda.inference.base import (
    AdapterNotFound,
    BackendError,
    BackendRejected,
    ChatBackend,
    GenerateOptions,
)
from coda.inference.images import image_part
from coda.inference.openai_compat import OpenAICompatBackend, build_request, parse_choices
from coda.procs import free_port

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [image_part(Image.new("RGB", (320, 200), (200, 30, 30))),
                                 {"type": "text", "text": "What next?"}]},
]


@pytest.fixture
async def served(transformers_serve_url: str, tiny_model_dir: Path) -> AsyncIterator[
        OpenAICompatBackend]:
    backend = OpenAICompatBackend(transformers_serve_url, model=str(tiny_model_dir), retries=0)
    yield backend
    await backend.aclose()


async def test_single_choice_with_an_image(served: OpenAICompatBackend) -> None:
    assert isinstance(served, ChatBackend)
    [completion] = await served.chat(MESSAGES, GenerateOptions(max_tokens=8, seed=1))
    assert isinstance(completion.text, str)
    assert completion.prompt_tokens > 50  # the image's tokens are in the prompt
    assert 1 <= completion.completion_tokens <= 8
    assert completion.finish_reason in ("stop", "length")
    assert completion.adapter is None


async def test_n_tops_up_missing_choices(served: OpenAICompatBackend) -> None:
    options = GenerateOptions(n=3, max_tokens=8, temperature=1.0, seed=5)
    completions = await served.chat(MESSAGES, options)
    assert len(completions) == 3
    assert served.honours_n is False
    assert all(c.completion_tokens > 0 and c.prompt_tokens > 0 for c in completions)
    again = await served.chat(MESSAGES, GenerateOptions(n=2, max_tokens=8))
    assert len(again) == 2


async def test_ready_lists_models(served: OpenAICompatBackend) -> None:
    detail = await served.ready()
    assert detail["backend"] == "openai"
    assert detail["served"] == []  # transformers serve lists the (empty) HF cache


async def test_unsupported_features_raise_clear_errors(served: OpenAICompatBackend) -> None:
    prefill = [*MESSAGES, {"role": "assistant", "content": "Thought: x\nAction: "}]
    with pytest.raises(BackendRejected, match=r"422.*continue_final_message") as info:
        await served.chat(prefill, GenerateOptions(max_tokens=4, continue_final_message=True))
    assert info.value.status == 422
    with pytest.raises(BackendRejected, match=r"400.*pinned"):
        await served.chat(MESSAGES, GenerateOptions(max_tokens=4, adapter="v1"))
    with pytest.raises(AdapterNotFound, match="404"):  # no LoRA routes at all: 404
        await served.load_adapter("v1", "/tmp/none")
    assert served.adapters() == {}


async def test_transport_errors_are_retried_then_reported() -> None:
    backend = OpenAICompatBackend(f"http://127.0.0.1:{free_port()}/v1", model="m",
                                  retries=2, backoff_s=0.01, timeout=5)
    with pytest.raises(BackendError, match=r"ConnectError.*after 3 attempts"):
        await backend.chat(MESSAGES, GenerateOptions(max_tokens=4))
    with pytest.raises(BackendError):
        await backend.ready()
    await backend.aclose()


# --- vLLM-like behaviour (n honoured, 503s, LoRA routes) on a small ASGI app ----------------


def _flaky_app(failures: int) -> tuple[FastAPI, list[dict[str, Any]]]:
    """A server that answers 503 ``failures`` times, then honours ``n``."""
    app = FastAPI()
    seen: list[dict[str, Any]] = []
    state: dict[str, Any] = {"failures": failures}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append({"path": "chat", **body})
        if state["failures"] > 0:
            state["failures"] -= 1
            return JSONResponse({"error": "busy"}, status_code=503)
        choices = [{"index": i, "message": {"role": "assistant", "content": f"s{i}"},
                    "finish_reason": "stop"} for i in range(body.get("n", 1))]
        return JSONResponse({"choices": choices,
                             "usage": {"prompt_tokens": 11, "completion_tokens": 3 * len(choices)}})

    return app, seen


async def test_503s_are_retried() -> None:
    app, seen = _flaky_app(failures=2)
    backend = OpenAICompatBackend("http://vllm", model="planner", retries=3, backoff_s=0.01,
                                  transport=httpx.ASGITransport(app=app))
    completions = await backend.chat(MESSAGES, GenerateOptions(n=4, max_tokens=4, adapter="v3"))
    assert [c.text for c in completions] == ["s0", "s1", "s2", "s3"]
    assert all(c.adapter == "v3" and c.completion_tokens == 3 for c in completions)
    assert backend.honours_n is True
    assert len(seen) == 3 and seen[-1]["n"] == 4 and seen[-1]["model"] == "v3"
    await backend.aclose()


async def test_tiny_temperature_is_sent_as_greedy() -> None:
    body = build_request(MESSAGES, GenerateOptions(temperature=5e-324), model="m", n=1,
                         seed=None)
    assert body["temperature"] == 0.0
    assert build_request(MESSAGES, GenerateOptions(temperature=0.5), model="m", n=1,
                         seed=None)["temperature"] == 0.5


async def test_retry_after_is_honoured() -> None:
    app = FastAPI()
    calls: list[float] = []

    @app.post("/v1/chat/completions")
    async def chat() -> JSONResponse:
        import time

        calls.append(time.monotonic())
        if len(calls) == 1:
            return JSONResponse({"error": "busy"}, status_code=429, headers={"Retry-After": "0.3"})
        return JSONResponse({"choices": [{"index": 0, "message": {"content": "ok"}}]})

    backend = OpenAICompatBackend("http://vllm", model="m", retries=1, backoff_s=0.001,
                                  transport=httpx.ASGITransport(app=app))
    [completion] = await backend.chat(MESSAGES, GenerateOptions(max_tokens=2))
    assert completion.text == "ok" and len(calls) == 2
    assert calls[1] - calls[0] >= 0.25  # waited what the server asked, not the tiny backoff
    await backend.aclose()


def test_build_request_prefill_and_adapter() -> None:
    options = GenerateOptions(n=2, max_tokens=7, seed=3, stop=["\n"], adapter="v2",
                              continue_final_message=True, extra={"frequency_penalty": 1})
    body = build_request(MESSAGES, options, model="base", n=2, seed=3)
    assert body["model"] == "v2" and body["n"] == 2 and body["seed"] == 3
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["stop"] == ["\n"] and body["frequency_penalty"] == 1
    plain = build_request(MESSAGES, GenerateOptions(), model="base", n=1, seed=None)
    assert plain["model"] == "base"
    assert not {"n", "seed", "stop", "continue_final_message"} & plain.keys()


def test_parse_choices_splits_usage() -> None:
    payload = {"choices": [{"index": 1, "message": {"content": "b"}, "token_ids": [1, 2]},
                           {"index": 0, "message": {"content": "a"}}],
               "usage": {"prompt_tokens": 9, "completion_tokens": 5}}
    a, b = parse_choices(payload, adapter=None)
    assert (a.text, a.completion_tokens, a.prompt_tokens) == ("a", 3, 9)
    assert (b.text, b.completion_tokens) == ("b", 2)
    with pytest.raises(BackendError, match="choices"):
        parse_choices({"choices": []}, adapter=None)



def test_logprobs_are_asked_for_and_parsed_as_vllm_sends_them() -> None:
    body = build_request(MESSAGES, GenerateOptions(logprobs=True), model="m", n=1, seed=None)
    assert body["logprobs"] is True and body["return_tokens_as_token_ids"] is True
    assert body["top_k"] == -1  # no top-k from the model's generation config: the full one
    assert "logprobs" not in build_request(MESSAGES, GenerateOptions(), model="m", n=1, seed=None)
    payload = {"choices": [{"index": 0, "message": {"content": "ok"}, "logprobs": {"content": [
        {"token": "token_id:17", "logprob": -0.25, "bytes": [111]},
        {"token": "token_id:151645", "logprob": -1.5e-5}]}}]}
    [c] = parse_choices(payload, adapter=None)
    assert c.token_ids == (17, 151645) and c.logprobs == (-0.25, -1.5e-5)
    [plain] = parse_choices({"choices": [{"message": {"content": "x"}}]}, adapter=None)
    assert plain.token_ids is None and plain.logprobs is None
    bad = {"choices": [{"message": {"content": "x"}, "logprobs": {"content": [
        {"token": "ok", "logprob": -1.0}]}}]}
    with pytest.raises(BackendError, match="logprobs"):
        parse_choices(bad, adapter=None)
