"""One typed description of a model backend, used by every model service's settings and by the
judge's ensemble entries: :class:`BackendSpec`; :func:`coda.inference.factory.make_backend`
builds the backend it describes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

BackendKind = Literal["transformers", "openai", "replay", "ocr"]


class BackendSpec(BaseModel):
    """Where a model runs: in this process (``transformers``) or behind an OpenAI-compatible
    server (``openai``: vLLM in production). Fields of the other kind are ignored."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendKind = Field(
        default="transformers",
        description="'transformers' (in-process), 'openai' (vLLM / any OpenAI-compatible "
                    "server), 'replay' (recorded outputs, for tests and benchmarks) or 'ocr' "
                    "(executor only: grounds the plan on the screenshot's OCR text, "
                    "coda.inference.ocr_executor)")
    model: str = Field(min_length=1, description="local model directory (transformers), "
                                                 "served model name (openai), replay file "
                                                 "(replay) or OCR engine 'rapidocr' (ocr)")
    base_url: str | None = Field(default=None, pattern=r"^https?://",
                                 description="OpenAI-compatible server URL (openai)")
    api_key: SecretStr | None = Field(default=None, description="its API key (openai)")
    device: str = Field(default="cpu", description="torch device (transformers)")
    dtype: str = Field(default="auto",
                       description="torch dtype (transformers); 'auto' = float32 on CPU")
    max_pixels: int | None = Field(default=None, gt=0,
                                   description="image budget per screenshot (transformers; "
                                               "ocr: the budget its coordinates assume)")
    backend_timeout_s: float = Field(default=300.0, gt=0,
                                     description="seconds per model-server request (openai)")
    backend_retries: int = Field(default=2, ge=0, le=10,
                                 description="retries of failed model-server requests (openai)")
    context_tokens: int | None = Field(
        default=None, gt=0,
        description="the model's context in tokens; default: the model's own (transformers)")

    @model_validator(mode="after")
    def _needs_url(self) -> BackendSpec:
        if self.backend == "openai" and not self.base_url:
            raise ValueError("base_url is required with backend 'openai'")
        return self

    def spec(self) -> BackendSpec:
        """The plain spec (settings classes that extend it hand it on this way)."""
        return BackendSpec.model_validate(
            {name: getattr(self, name) for name in BackendSpec.model_fields})
