"""Judge service settings (environment variables prefixed ``CODA_JUDGE_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from coda.contracts.services_api import ModelName
from coda.inference.spec import BackendSpec
from coda.modelservice.settings import ModelServiceSettings


class JudgeModelSpec(BackendSpec):
    """One judge model of the ensemble: a name and the backend that serves it, e.g.
    ``{"name": "qwen72b", "backend": "openai", "base_url": "http://vllm-judge:8000/v1",
    "model": "Qwen/Qwen2.5-VL-72B-Instruct"}``."""

    name: ModelName = Field(description="name used in votes and in policy.models")


class JudgeSettings(ModelServiceSettings):
    """``CODA_JUDGE_MODELS`` is a JSON list of :class:`JudgeModelSpec`."""

    model_config = SettingsConfigDict(env_prefix="CODA_JUDGE_", extra="ignore")

    port: int = Field(default=8003, ge=1, le=65535)
    models: list[JudgeModelSpec] = Field(default_factory=list, max_length=16)
    top_p: float = Field(default=0.6, gt=0, le=1, description="SEAgent samples votes at 0.6")
    max_tokens: int = Field(default=2048, ge=1, le=32_768, description="tokens of one vote")
    high_max_pixels: int | None = Field(default=None, gt=0,
                                        description="cap on high-resolution screenshots")
    max_concurrency: int = Field(default=4, ge=1)
    max_body_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
