"""The executor's model backend, chosen by settings (built by :mod:`coda.inference.factory`,
which imports torch only for the transformers backend)."""

from __future__ import annotations

from coda.inference.base import ChatBackend
from coda.inference.factory import make_backend
from executor_service.settings import ExecutorSettings


def build_backend(settings: ExecutorSettings) -> ChatBackend:
    """A :class:`ChatBackend` for ``settings.backend`` (blocking: may load a model)."""
    if settings.backend == "transformers":
        return make_backend(
            "transformers", model_path=settings.model, device=settings.device,
            max_pixels=settings.max_pixels,
            dtype=None if settings.dtype == "auto" and settings.device == "cpu" else settings.dtype,
        )
    key = settings.api_key.get_secret_value() if settings.api_key else None
    return make_backend(
        "openai", base_url=settings.base_url, model=settings.model, api_key=key,
        timeout=settings.request_timeout_s, retries=settings.retries,
    )
