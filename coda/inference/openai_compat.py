"""OpenAI-compatible HTTP backend (vLLM in production; ``transformers serve`` in tests).

* ``n`` samples: the request asks for ``n``; a server that returns fewer choices (e.g.
  ``transformers serve``, which ignores ``n``) gets the rest requested concurrently, one
  choice per request, and from then on all ``n`` are requested that way.
* Executor pre-fill: with ``continue_final_message`` the request carries vLLM's
  ``continue_final_message: true, add_generation_prompt: false``.
* Adapters: the request's ``model`` is ``options.adapter`` (a LoRA name) or the default model;
  ``load_adapter`` / ``unload_adapter`` use vLLM's runtime LoRA endpoints
  (``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, ``--enable-lora``). Their outcome is read from
  the status codes vLLM 0.32 gives (checked against the real server, tests/vllm/): load 200 =
  loaded, 404 = no adapter at the path, 400 = a name already taken (the backend asks
  ``/v1/models`` first, where vLLM lists loaded adapters), 500 "add_lora method failed" = files
  that do not load (not retried; the server keeps serving); unload 200 or 404 = gone.
* Transport errors, 408, 429 and 5xx are retried by :func:`coda.clients.base.http_retry`
  (the one retry policy); other 4xx raise :class:`~coda.inference.base.BackendRejected`.
* A prompt longer than the model's context is :class:`~coda.inference.base.PromptTooLong`
  (vLLM refuses it with 400 "... maximum context length ..."), as with the transformers backend;
  :meth:`OpenAICompatBackend.context_tokens` reads ``max_model_len`` from ``/v1/models``.
* Temperatures below :data:`~coda.inference.base.GREEDY_BELOW` are sent as 0 (greedy).
* Usage: prompt tokens from ``usage``; completion tokens per choice from ``token_ids`` when
  the server returns them, else ``usage.completion_tokens`` shared evenly among the choices.
"""

from __future__ import annotations

import asyncio
import math
import re
from typing import Any

import httpx

from coda.clients.base import http_retry, retry_after
from coda.inference.base import (
    AdapterInvalid,
    AdapterNotFound,
    BackendError,
    BackendRejected,
    ChatMessage,
    Completion,
    GenerateOptions,
    PromptTooLong,
    is_greedy,
)
from coda.logging import get_logger

log = get_logger(__name__)

RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


# vLLM's refusals of a prompt that does not fit (wording differs between its code paths)
_CONTEXT_PATTERNS = (
    re.compile(r"Input length \((?P<prompt>\d+)\) exceeds model's maximum context length "
               r"\((?P<context>\d+)\)"),
    re.compile(r"maximum context length is (?P<context>\d+) tokens.*?"
               r"(?:requested|request has|contains at least) (?P<prompt>\d+)", re.S),
    re.compile(r"prompt \(length (?P<prompt>\d+)\) is longer than the maximum model length of "
               r"(?P<context>\d+)"),
    re.compile(r"max_tokens=\d+ cannot be greater than max_model_len=(?P<context>\d+)"),
    re.compile(r"maximum context length|max_model_len|maximum model length"),
)


def context_refusal(text: str, max_tokens: int) -> PromptTooLong | None:
    """The :class:`PromptTooLong` a server's 400 body means, None for any other refusal."""
    for pattern in _CONTEXT_PATTERNS:
        match = pattern.search(text)
        if match:
            found = match.groupdict()
            return PromptTooLong(int(found.get("prompt") or 0), max_tokens,
                                 int(found.get("context") or 0))
    return None


def _root_url(base_url: str) -> str:
    """``http://h:8000``, ``http://h:8000/`` and ``http://h:8000/v1`` all give ``http://h:8000``."""
    url = base_url.rstrip("/")
    return url.removesuffix("/v1")


def build_request(
    messages: list[ChatMessage], options: GenerateOptions, *, model: str, n: int,
    seed: int | None,
) -> dict[str, Any]:
    """The ``/v1/chat/completions`` body for ``n`` samples (pure)."""
    body: dict[str, Any] = {
        "model": options.adapter or model,
        "messages": messages,
        "max_tokens": options.max_tokens,
        "temperature": 0.0 if is_greedy(options.temperature) else options.temperature,
        "top_p": options.top_p,
    }
    if n != 1:
        body["n"] = n
    if seed is not None:
        body["seed"] = seed
    if options.stop:
        body["stop"] = list(options.stop)
    if options.logprobs:  # vLLM: token ids spelled "token_id:<id>" in the logprobs entries
        body["logprobs"] = True
        body["return_tokens_as_token_ids"] = True
        # sample what the log-probs describe: no top-k, whatever the model's generation config
        body["top_k"] = -1
    if options.continue_final_message:
        body["continue_final_message"] = True
        body["add_generation_prompt"] = False
    body.update(options.extra)
    return body


def parse_choices(payload: dict[str, Any], adapter: str | None) -> list[Completion]:
    """Completions from a chat-completions response body (pure)."""
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BackendError("response.choices: missing or empty")
    usage = payload.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    total = int(usage.get("completion_tokens") or 0)
    share, extra = divmod(total, len(choices))
    completions = []
    for i, choice in enumerate(sorted(choices, key=lambda c: c.get("index", 0))):
        message = choice.get("message") or {}
        text = message.get("content")
        if not isinstance(text, str):
            raise BackendError(f"response.choices[{i}].message.content: missing")
        token_ids = choice.get("token_ids")
        count = len(token_ids) if isinstance(token_ids, list) else share + (1 if i < extra else 0)
        ids, lps = token_logprobs(choice.get("logprobs"), f"response.choices[{i}].logprobs")
        completions.append(Completion(
            text=text, prompt_tokens=prompt_tokens, completion_tokens=count,
            finish_reason=choice.get("finish_reason"), adapter=adapter,
            token_ids=ids, logprobs=lps,
        ))
    return completions


def token_logprobs(entry: Any, where: str) -> tuple[tuple[int, ...] | None,
                                                   tuple[float, ...] | None]:
    """Token ids and log-probabilities of a choice's ``logprobs.content`` (tokens given as
    ``token_id:<id>``, vLLM's ``return_tokens_as_token_ids``); (None, None) when absent."""
    content = entry.get("content") if isinstance(entry, dict) else None
    if not isinstance(content, list):
        return None, None
    ids, lps = [], []
    for item in content:
        token = item.get("token") if isinstance(item, dict) else None
        value = item.get("logprob") if isinstance(item, dict) else None
        if not (isinstance(token, str) and token.startswith("token_id:")
                and token[9:].lstrip("-").isdigit() and isinstance(value, int | float)
                and math.isfinite(value)):
            raise BackendError(f"{where}: entries must be token_id:<id> with a finite logprob")
        ids.append(int(token[9:]))
        lps.append(float(value))
    return tuple(ids), tuple(lps)


class OpenAICompatBackend:
    """A :class:`~coda.inference.base.ChatBackend` over an OpenAI-compatible HTTP server."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = _root_url(base_url)
        self.model = model
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )
        self._adapters: dict[str, str] = {}
        self.honours_n: bool | None = None
        """None until a response shows whether the server returns ``n`` choices."""

    # -- HTTP with retries --

    async def _request(self, method: str, path: str, json: Any = None, *,
                       retry_statuses: frozenset[int] = RETRY_STATUSES) -> httpx.Response:
        """The answer to ``method path``; transient failures are retried, any other status
        is returned for the caller to decide on."""
        attempts = self.retries + 1
        retrying = http_retry(attempts, _transient, backoff_s=self.backoff_s,
                              max_backoff_s=self.max_backoff_s)
        try:
            async for attempt in retrying:
                with attempt:
                    response = await self._client.request(method, path, json=json)
                    if response.status_code in retry_statuses:
                        raise _Retryable(response)
        except _Retryable as exc:
            raise BackendError(f"{method} {path}: HTTP {exc.status}: {exc.text} "
                               f"(after {attempts} attempts)") from exc
        except httpx.TransportError as exc:
            raise BackendError(f"{method} {path}: {type(exc).__name__}: {exc} "
                               f"(after {attempts} attempts)") from exc
        return response

    async def _ok(self, method: str, path: str, json: Any = None) -> httpx.Response:
        """:meth:`_request`, and a 4xx is :class:`BackendRejected`."""
        response = await self._request(method, path, json)
        if response.status_code >= 400:
            raise BackendRejected(f"{method} {path}: HTTP {response.status_code}: "
                                  f"{response.text[:500]}", response.status_code)
        return response

    # -- chat --

    async def _complete(
        self, messages: list[ChatMessage], options: GenerateOptions, n: int, seed: int | None
    ) -> list[Completion]:
        body = build_request(messages, options, model=self.model, n=n, seed=seed)
        response = await self._request("POST", "/v1/chat/completions", json=body)
        if response.status_code == 400:
            refusal = context_refusal(response.text, options.max_tokens)
            if refusal is not None:
                raise refusal
        if response.status_code >= 400:
            raise BackendRejected(f"POST /v1/chat/completions: HTTP {response.status_code}: "
                                  f"{response.text[:500]}", response.status_code)
        try:
            payload = response.json()
        except ValueError as exc:
            raise BackendError(f"response: not JSON: {response.text[:200]!r}") from exc
        return parse_choices(payload, options.adapter)

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        """Exactly ``options.n`` completions; missing choices are requested concurrently."""
        n = options.n
        if n < 1:
            raise ValueError(f"n: must be >= 1, got {n}")
        if self.honours_n is False and n > 1:
            completions: list[Completion] = []
        else:
            completions = (await self._complete(messages, options, n, options.seed))[:n]
            if n > 1:
                self.honours_n = len(completions) == n
        missing = n - len(completions)
        if missing > 0:
            offset = len(completions)
            extra = await asyncio.gather(*(
                self._complete(messages, options, 1, _nth_seed(options.seed, offset + i))
                for i in range(missing)
            ))
            completions.extend(c for batch in extra for c in batch[:1])
        if len(completions) != n:
            raise BackendError(f"response.choices: got {len(completions)} of n={n}")
        return completions

    # -- adapters (vLLM runtime LoRA updating) --

    async def _models(self) -> list[dict[str, Any]]:
        response = await self._ok("GET", "/v1/models")
        try:
            data = response.json().get("data") or []
        except (ValueError, AttributeError) as exc:
            raise BackendError(f"GET /v1/models: unexpected body {response.text[:200]!r}") from exc
        return [m for m in data if isinstance(m, dict)]

    async def _served(self) -> list[str]:
        return [str(m.get("id")) for m in await self._models()]

    async def context_tokens(self) -> int | None:
        """The served model's context (vLLM's ``max_model_len`` in ``/v1/models``); None when
        the server does not say (``transformers serve``)."""
        for entry in await self._models():
            if entry.get("id") == self.model and isinstance(entry.get("max_model_len"), int):
                return int(entry["max_model_len"])
        return None

    async def load_adapter(self, version: str, path: str) -> None:
        """``POST /v1/load_lora_adapter`` unless ``/v1/models`` lists ``version`` already."""
        if version not in await self._served():
            response = await self._request("POST", "/v1/load_lora_adapter",
                                           json={"lora_name": version, "lora_path": path},
                                           retry_statuses=RETRY_STATUSES - {500})
            detail = f"HTTP {response.status_code}: {response.text[:300]}"
            if response.status_code == 404:
                raise AdapterNotFound(f"the model server found no adapter: {detail}")
            if response.status_code in (400, 500):  # vLLM: 500 "add_lora method failed"
                raise AdapterInvalid(f"the model server cannot load it: {detail}")
            if response.status_code >= 400:
                raise BackendError(f"POST /v1/load_lora_adapter: {detail}")
        self._adapters[version] = path
        log.info("inference.adapter_loaded", version=version, server=self.base_url)

    async def unload_adapter(self, version: str) -> None:
        """``POST /v1/unload_lora_adapter``; 404 (the server does not have it) counts as done."""
        response = await self._request("POST", "/v1/unload_lora_adapter",
                                       json={"lora_name": version})
        if response.status_code >= 400 and response.status_code != 404:
            raise BackendError(f"POST /v1/unload_lora_adapter: HTTP {response.status_code}: "
                               f"{response.text[:300]}")
        self._adapters.pop(version, None)
        log.info("inference.adapter_unloaded", version=version, server=self.base_url)

    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    async def ready(self) -> dict[str, Any]:
        """``GET /v1/models``; raises :class:`BackendError` when the server does not answer."""
        models = await self._models()
        context = next((m.get("max_model_len") for m in models if m.get("id") == self.model),
                       None)
        return {"backend": self.name, "base_url": self.base_url, "model": self.model,
                "served": [str(m.get("id")) for m in models], "context_tokens": context,
                "adapters": sorted(self._adapters)}

    async def aclose(self) -> None:
        await self._client.aclose()


def _nth_seed(seed: int | None, i: int) -> int | None:
    """Distinct seeds for the one-choice top-up requests (equal seeds give equal samples)."""
    return None if seed is None else seed + i


class _Retryable(Exception):
    """A transient HTTP status (retried; ``retry_after`` from the server's header)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.status = response.status_code
        self.text = response.text[:500]
        self.retry_after = retry_after(response)


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TransportError)
