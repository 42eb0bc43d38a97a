"""The backend contract: OpenAI-format chat messages in, ``n`` completions out.

Messages use the OpenAI chat format; images are ``{"type": "image_url", "image_url":
{"url": "data:image/png;base64,..."}}`` parts. Both backends (OpenAI-compatible HTTP and
in-process transformers) implement :class:`ChatBackend`.

Errors are typed so that a service maps them by class, never by reading their text:
:class:`BackendError` (the model server failed or cannot be reached), :class:`BackendRejected`
(the model server refused the request as invalid), :class:`PromptTooLong`, and the adapter
errors :class:`AdapterNotFound` / :class:`AdapterInvalid`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

ChatMessage = dict[str, Any]

GREEDY_BELOW = 1e-4
"""Temperatures below this are greedy decoding: dividing logits by 1e-300 overflows them to
infinity and sampling fails (vLLM uses the same rule with 1e-5)."""


def is_greedy(temperature: float) -> bool:
    """Whether ``temperature`` means greedy decoding (0, or too small to sample with)."""
    return temperature < GREEDY_BELOW


@dataclass(frozen=True)
class GenerateOptions:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    stop: list[str] | None = None
    continue_final_message: bool = False
    """Continue the last (assistant) message instead of opening a new turn (executor pre-fill)."""
    adapter: str | None = None
    """Adapter / served model name; ``None`` = the backend's default."""
    logprobs: bool = False
    """Also return each generated token's id and log-probability (at the sampling
    temperature, before top-p), for the trainer's importance correction."""
    cancel: threading.Event | None = field(default=None, compare=False)
    """Set by the caller (client gone, deadline passed): generation stops at the next token."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    adapter: str | None = None
    """The adapter (version) that produced it; ``None`` = base model."""
    token_ids: tuple[int, ...] | None = None
    """Generated token ids (EOS included when generation stopped on it), when asked for."""
    logprobs: tuple[float, ...] | None = None
    """Log-probability of each of ``token_ids`` under the sampling distribution."""


class BackendError(RuntimeError):
    """The backend could not produce completions (after its retries): a server error, a
    transport error or an unusable answer."""


class BackendRejected(BackendError):
    """The model server answered 4xx: it refused the request as invalid (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class PromptTooLong(ValueError):
    """The prompt plus ``max_tokens`` does not fit the model's context."""

    def __init__(self, prompt_tokens: int, max_tokens: int, context: int) -> None:
        super().__init__(f"the prompt has {prompt_tokens} tokens; with max_tokens {max_tokens} "
                         f"it exceeds the model's context of {context} tokens")
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.context = context


class AdapterNotFound(LookupError):
    """No adapter at the given location (nothing was loaded)."""


class AdapterInvalid(ValueError):
    """Files were found but do not load as an adapter of this model (nothing was loaded)."""


@runtime_checkable
class ChatBackend(Protocol):
    name: str

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        """Return exactly ``options.n`` completions."""
        ...

    async def load_adapter(self, version: str, path: str) -> None: ...

    async def unload_adapter(self, version: str) -> None: ...

    def adapters(self) -> dict[str, str]:
        """Loaded adapters: version -> path."""
        ...

    async def ready(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...
