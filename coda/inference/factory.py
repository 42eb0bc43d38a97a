"""Build a chat backend by kind: ``"transformers"`` (in-process) or ``"openai"`` (HTTP)."""

from __future__ import annotations

from typing import Any

from coda.inference.base import ChatBackend

BACKEND_KINDS = ("transformers", "openai")


def make_backend(kind: str, **kwargs: Any) -> ChatBackend:
    """A backend of ``kind``; ``kwargs`` go to its constructor.

    * ``"transformers"``: ``model_path``, ``device``, ``dtype``, ``max_pixels``
      (:class:`~coda.inference.transformers_local.TransformersBackend`; imports torch).
    * ``"openai"``: ``base_url``, ``model``, ``api_key``, ``timeout``, ``retries``
      (:class:`~coda.inference.openai_compat.OpenAICompatBackend`; no torch).
    """
    if kind == "transformers":
        from coda.inference.transformers_local import TransformersBackend

        return TransformersBackend(**kwargs)
    if kind == "openai":
        from coda.inference.openai_compat import OpenAICompatBackend

        return OpenAICompatBackend(**kwargs)
    raise ValueError(f"backend kind: expected one of {BACKEND_KINDS}, got {kind!r}")
