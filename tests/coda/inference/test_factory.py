from __future__ import annotations

from pathlib import Path

import pytest

from coda.inference.base import ChatBackend
from coda.inference.factory import make_backend
from coda.inference.openai_compat import OpenAICompatBackend


def test_factory(tiny_model_dir: Path) -> None:
    backend = make_backend("openai", base_url="http://x:8000/v1/", model="m")
    assert isinstance(backend, OpenAICompatBackend) and backend.base_url == "http://x:8000"
    local = make_backend("transformers", model_path=tiny_model_dir)
    assert isinstance(local, ChatBackend) and local.name == "transformers"
    with pytest.raises(ValueError, match="backend kind"):
        make_backend("vllm")
