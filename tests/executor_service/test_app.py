"""The executor service over real HTTP with the tiny random Qwen2.5-VL (transformers backend).

A random model writes garbage, so these tests check the contract: 200 with either a typed
action or a typed parse error, G results for G thoughts in one backend call, the pre-fill
the model continues, and 422 naming the field for bad input."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coda.actions import to_pyautogui
from coda.clients.base import ServiceError
from coda.clients.executor import ExecutorClient
from coda.contracts.services_api import (
    ActBatchRequest,
    ActBatchResponse,
    ActRequest,
    ActResult,
    HistoryStep,
    ImageRef,
    Sampling,
)
from coda.inference.base import ChatMessage, Completion, GenerateOptions
from coda.inference.encoding import render_prompt, to_processor_messages
from coda.inference.factory import make_backend
from coda.inference.transformers_local import TransformersBackend
from coda.procs import free_port
from executor_service.app import create_app
from executor_service.logic import generate_each
from executor_service.settings import ExecutorSettings
from tests.fixtures.images import image_b64, image_bytes
from tests.fixtures.services import TOKENS, RunningService, asgi_client

SAMPLING = Sampling(temperature=1.0, top_p=0.9, max_tokens=16, seed=7)
THOUGHTS = ["Click the File menu.", "Open the Edit menu.", "Scroll down the list.",
            "Type the file name."]


def _check(result: ActResult) -> None:
    """Either a typed action (with its pyautogui code) or a typed parse error."""
    if result.error is None:
        assert result.action is not None
        assert result.pyautogui == to_pyautogui(result.action)
    else:
        assert result.action is None and result.pyautogui is None
        assert result.error.text == result.raw and result.error.message


def _act_body(**over: Any) -> dict[str, Any]:
    body = ActRequest(instruction="Save the file", thought=THOUGHTS[0],
                      screenshot=ImageRef(b64=image_b64()), sampling=SAMPLING)
    return {**body.model_dump(mode="json", exclude_none=True), **over}


@pytest.fixture
async def http(executor_service: RunningService) -> AsyncIterator[httpx.AsyncClient]:
    async with executor_service.http() as client:
        yield client


async def test_ready(http: httpx.AsyncClient) -> None:
    resp = await http.get("/readyz")
    assert resp.status_code == 200
    assert resp.json()["detail"]["executor"]["backend"] == "transformers"


async def test_act(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/act", json=_act_body(), headers={"x-request-id": "req-1"})
    assert resp.status_code == 200
    assert resp.headers["x-request-id"] == "req-1"
    _check(ActResult.model_validate(resp.json()))


async def test_act_with_store_keys_and_history(executor_service: RunningService) -> None:
    store = executor_service.store
    old, new = store.put(image_bytes(color=(10, 10, 10))), store.put(image_bytes(color=(200, 0, 0)))
    history = [HistoryStep(thought="Thought: Open the menu.\nAction: click File",
                           action_text="click(start_box='(10,20)')",
                           screenshot=ImageRef(ref=old))]
    req = ActRequest(instruction="Save the file", thought="Click Save.", history=history,
                     screenshot=ImageRef(ref=new), sampling=SAMPLING)
    async with executor_service.client(ExecutorClient) as client:
        _check(await client.act(req))


async def test_act_batch_returns_g_results(executor_service: RunningService) -> None:
    req = ActBatchRequest(instruction="Save the file", thoughts=THOUGHTS,
                          screenshot=ImageRef(b64=image_b64()), sampling=SAMPLING)
    async with executor_service.client(ExecutorClient) as client:
        resp = await client.act_batch(req)
    assert isinstance(resp, ActBatchResponse)
    assert len(resp.results) == len(THOUGHTS)
    for result in resp.results:
        _check(result)


BAD_BODIES: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("/v1/act", {"thought": None}, ["body", "thought"]),
    ("/v1/act", {"instruction": ""}, ["body", "instruction"]),
    ("/v1/act", {"screen_width": 0}, ["body", "screen_width"]),
    ("/v1/act", {"screenshot": {"b64": "aGVsbG8=", "ref": f"sha256/ab/{'ab' * 32}.png"}},
     ["body", "screenshot"]),
    ("/v1/act", {"screenshot": {"b64": "%%% not base64"}}, ["body", "screenshot", "b64"]),
    ("/v1/act", {"screenshot": {"b64": base64.b64encode(b"just text").decode()}},
     ["body", "screenshot", "b64"]),
    ("/v1/act", {"screenshot": {"ref": "missing/shot.png"}}, ["body", "screenshot", "ref"]),
    ("/v1/act", {"screenshot": {"ref": f"sha256/ab/{'ab' * 32}.png"}},
     ["body", "screenshot", "ref"]),
    ("/v1/act", {"screenshot": {"ref": "../../etc/passwd"}}, ["body", "screenshot", "ref"]),
    ("/v1/act", {"history": [{"thought": "t", "screenshot": {"b64": "!!"}}]},
     ["body", "history", 0, "screenshot", "b64"]),
    ("/v1/act", {"sampling": {"temperature": 5}}, ["body", "sampling", "temperature"]),
    ("/v1/act/batch", {"thought": None, "thoughts": []}, ["body", "thoughts"]),
]


@pytest.mark.parametrize(("path", "over", "loc"), BAD_BODIES,
                         ids=[".".join(map(str, b[2][1:])) + f"@{b[0]}" for b in BAD_BODIES])
async def test_bad_input_is_422_naming_the_field(
    http: httpx.AsyncClient, path: str, over: dict[str, Any], loc: list[Any]
) -> None:
    body = {k: v for k, v in _act_body(**over).items() if v is not None}
    if path.endswith("batch"):
        body.pop("thought", None)
    resp = await http.post(path, json=body)
    assert resp.status_code == 422, resp.text
    assert loc in [d["loc"] for d in resp.json()["detail"]]


async def test_client_reports_422(executor_service: RunningService) -> None:
    req = ActRequest(instruction="x", thought="y", sampling=SAMPLING,
                     screenshot=ImageRef(ref=f"sha256/ab/{'ab' * 32}.png"))
    async with executor_service.client(ExecutorClient) as client:
        with pytest.raises(ServiceError) as info:
            await client.act(req)
    assert info.value.status == 422
    assert "screenshot" in str(info.value.detail)


# --- what the model saw: one batched call, pre-filled assistant turn ------------------------


class RecordingBackend(TransformersBackend):
    """The real transformers backend, remembering each ``chat_batch`` call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list[list[ChatMessage]], GenerateOptions]] = []

    async def chat_batch(self, conversations: list[list[ChatMessage]],
                         options: GenerateOptions) -> list[list[Completion]]:
        self.calls.append((conversations, options))
        return await super().chat_batch(conversations, options)


class ChatOnly:
    """A backend without ``chat_batch`` (like an OpenAI-compatible one)."""

    name = "chat-only"

    def __init__(self, inner: TransformersBackend) -> None:
        self.inner = inner

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions,
                   ) -> list[Completion]:
        return await self.inner.chat(messages, options)


@pytest.fixture(scope="module")
def recording_backend(tiny_model_dir: Path) -> RecordingBackend:
    return RecordingBackend(str(tiny_model_dir))


async def test_batch_is_one_call_and_prefill_is_continued(
    recording_backend: RecordingBackend, tmp_path: Path
) -> None:
    settings = ExecutorSettings(model="unused", artifacts_url=str(tmp_path), **TOKENS.env())
    app = create_app(settings, backend=recording_backend)
    recording_backend.calls.clear()
    req = ActBatchRequest(instruction="Save the file", thoughts=THOUGHTS,
                          screenshot=ImageRef(b64=image_b64()), sampling=SAMPLING)
    async with asgi_client(app) as http:
        resp = await ExecutorClient("http://service", client=http).act_batch(req)
    assert len(resp.results) == len(THOUGHTS)
    assert len(recording_backend.calls) == 1  # G thoughts, ONE batched generate
    conversations, options = recording_backend.calls[0]
    assert len(conversations) == len(THOUGHTS)
    assert options.continue_final_message and options.n == 1
    for conversation, thought in zip(conversations, THOUGHTS, strict=True):
        converted, images = to_processor_messages(conversation)
        prompt = render_prompt(recording_backend.processor, converted,
                               continue_final_message=True)
        assert prompt.endswith(f"<|im_start|>assistant\nThought: {thought}\nAction: ")
        assert len(images) == 1


async def test_backend_without_chat_batch_gets_concurrent_calls(
    recording_backend: RecordingBackend,
) -> None:
    recording_backend.calls.clear()
    msgs: list[list[ChatMessage]] = [
        [{"role": "user", "content": f"step {i}"}, {"role": "assistant", "content": "Thought: "}]
        for i in range(3)
    ]
    options = GenerateOptions(max_tokens=4, continue_final_message=True)
    out = await generate_each(ChatOnly(recording_backend), msgs, options)  # type: ignore[arg-type]
    assert len(out) == 3 and all(isinstance(c, Completion) for c in out)
    assert [len(convs) for convs, _ in recording_backend.calls] == [1, 1, 1]


async def test_unreachable_model_server_is_502_and_not_ready(tmp_path: Path) -> None:
    """The openai backend against a port nobody listens on: a clear 502, /readyz 503."""
    settings = ExecutorSettings(backend="openai", base_url=f"http://127.0.0.1:{free_port()}/v1",
                                model="ui-tars", backend_retries=0, artifacts_url=str(tmp_path),
                                **TOKENS.env())
    backend = make_backend(settings.spec())
    app = create_app(settings, backend=backend)
    try:
        async with asgi_client(app, wait_ready=False) as http:
            resp = await http.post("/v1/act", json=_act_body())
            ready = await http.get("/readyz")
    finally:
        await backend.aclose()
    assert resp.status_code == 502
    assert "model backend" in resp.json()["detail"]
    assert ready.status_code == 503
