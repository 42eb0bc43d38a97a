"""Build the chat backend a :class:`~coda.inference.spec.BackendSpec` describes."""

from __future__ import annotations

from coda.inference.base import ChatBackend
from coda.inference.spec import BackendSpec


def make_backend(spec: BackendSpec) -> ChatBackend:
    """The backend of ``spec`` (blocking: a transformers backend loads its model; only that
    kind imports torch)."""
    if spec.backend == "transformers":
        from coda.inference.encoding import DEFAULT_MAX_PIXELS
        from coda.inference.transformers_local import TransformersBackend

        dtype = None if spec.dtype == "auto" and spec.device == "cpu" else spec.dtype
        return TransformersBackend(
            spec.model, device=spec.device, dtype=dtype,
            max_pixels=spec.max_pixels or DEFAULT_MAX_PIXELS, context_tokens=spec.context_tokens)
    if spec.backend == "replay":
        from coda.inference.replay import ReplayBackend

        return ReplayBackend(spec.model)
    if spec.backend == "ocr":
        from coda.inference.ocr_executor import make_ocr_backend

        return make_ocr_backend(spec.model, max_pixels=spec.max_pixels)
    from coda.inference.openai_compat import OpenAICompatBackend

    assert spec.base_url is not None  # BackendSpec requires it for 'openai'
    return OpenAICompatBackend(
        spec.base_url, spec.model,
        api_key=spec.api_key.get_secret_value() if spec.api_key else None,
        timeout=spec.backend_timeout_s, retries=spec.backend_retries)
