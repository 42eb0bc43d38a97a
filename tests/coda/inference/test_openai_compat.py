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
  ``coda.inference.transformers_local`` is applied first (the fixture launches the CLI so).

Retries and the vLLM LoRA routes are exercised against a small ASGI app (vLLM needs a GPU).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from PIL import Image

from coda.inference.base import BackendError, ChatBackend, GenerateOptions
from coda.inference.images import image_part
from coda.inference.openai_compat import OpenAICompatBackend, build_request, parse_choices
from tests.fixtures.models import free_port

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
    with pytest.raises(BackendError, match=r"422.*continue_final_message"):
        await served.chat(prefill, GenerateOptions(max_tokens=4, continue_final_message=True))
    with pytest.raises(BackendError, match=r"400.*pinned"):
        await served.chat(MESSAGES, GenerateOptions(max_tokens=4, adapter="v1"))
    with pytest.raises(BackendError, match="404"):
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


def _vllm_like_app(failures: int) -> tuple[FastAPI, list[dict[str, Any]]]:
    app = FastAPI()
    seen: list[dict[str, Any]] = []
    state = {"failures": failures}

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

    @app.post("/v1/load_lora_adapter")
    async def load(request: Request) -> PlainTextResponse:
        seen.append({"path": "load", **await request.json()})
        return PlainTextResponse("Success: LoRA adapter loaded")

    @app.post("/v1/unload_lora_adapter")
    async def unload(request: Request) -> PlainTextResponse:
        seen.append({"path": "unload", **await request.json()})
        return PlainTextResponse("Success")

    return app, seen


async def test_vllm_features_and_retries() -> None:
    app, seen = _vllm_like_app(failures=2)
    backend = OpenAICompatBackend("http://vllm", model="planner", retries=3, backoff_s=0.01,
                                  transport=httpx.ASGITransport(app=app))
    completions = await backend.chat(MESSAGES, GenerateOptions(n=4, max_tokens=4, adapter="v3"))
    assert [c.text for c in completions] == ["s0", "s1", "s2", "s3"]
    assert all(c.adapter == "v3" and c.completion_tokens == 3 for c in completions)
    assert backend.honours_n is True
    assert len(seen) == 3 and seen[-1]["n"] == 4 and seen[-1]["model"] == "v3"

    await backend.load_adapter("v3", "/adapters/v3")
    await backend.unload_adapter("v3")
    assert seen[-2] == {"path": "load", "lora_name": "v3", "lora_path": "/adapters/v3"}
    assert seen[-1] == {"path": "unload", "lora_name": "v3"}
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

