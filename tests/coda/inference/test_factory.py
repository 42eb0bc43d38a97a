"""One typed backend spec, and the backend it builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from coda.inference.base import ChatBackend
from coda.inference.factory import make_backend
from coda.inference.openai_compat import OpenAICompatBackend
from coda.inference.spec import BackendSpec


def test_factory(tiny_model_dir: Path) -> None:
    spec = BackendSpec(backend="openai", base_url="http://x:8000/v1/", model="m", api_key="k")
    backend = make_backend(spec)
    assert isinstance(backend, OpenAICompatBackend) and backend.base_url == "http://x:8000"
    local = make_backend(BackendSpec(model=str(tiny_model_dir), context_tokens=4096))
    assert isinstance(local, ChatBackend) and local.name == "transformers"
    assert local.context_tokens == 4096  # type: ignore[attr-defined]


@pytest.mark.parametrize(("fields", "message"), [
    ({"backend": "vllm", "model": "m"}, "'transformers', 'openai', 'replay' or 'ocr'"),
    ({"backend": "openai", "model": "m"}, "base_url is required"),
    ({"backend": "openai", "model": "m", "base_url": "file:///x"}, "should match pattern"),
    ({"model": "m", "options": {}}, "Extra inputs"),
    ({"model": ""}, "at least 1 character"),
])
def test_spec_is_typed(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        BackendSpec.model_validate(fields)


def test_api_key_is_secret() -> None:
    spec = BackendSpec(backend="openai", base_url="http://x/v1", model="m", api_key="s3cr3t")
    assert "s3cr3t" not in repr(spec) and "s3cr3t" not in str(spec.model_dump())
