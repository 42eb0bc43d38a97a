"""The backend contract: OpenAI-format chat messages in, ``n`` completions out.

Messages use the OpenAI chat format; images are ``{"type": "image_url", "image_url":
{"url": "data:image/png;base64,..."}}`` parts. Both backends (OpenAI-compatible HTTP and
in-process transformers) implement :class:`ChatBackend`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

ChatMessage = dict[str, Any]


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
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    adapter: str | None = None
    """The adapter (version) that produced it; ``None`` = base model."""


class BackendError(RuntimeError):
    """The backend could not produce completions (after its retries)."""


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
