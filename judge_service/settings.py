"""Judge service settings (environment variables prefixed ``CODA_JUDGE_``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class JudgeModelSpec(BaseModel):
    """One judge model of the ensemble: a name and the backend that serves it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="name used in votes and in policy.models")
    backend: str = Field(default="openai", description="'openai' or 'transformers'")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="make_backend keyword arguments, e.g. base_url/model or model_path/device")


class JudgeSettings(BaseSettings):
    """``CODA_JUDGE_MODELS`` is a JSON list of :class:`JudgeModelSpec`."""

    model_config = SettingsConfigDict(env_prefix="CODA_JUDGE_", env_file=".env", extra="ignore")

    models: list[JudgeModelSpec] = Field(default_factory=list)
    top_p: float = Field(default=0.6, gt=0, le=1, description="SEAgent samples votes at 0.6")
    max_tokens: int = Field(default=2048, ge=1)
    high_max_pixels: int | None = Field(default=None,
                                        description="cap on high-resolution screenshots")
    host: str = "127.0.0.1"
    port: int = 8003
    artifacts_url: str = Field(default="file://./.coda/artifacts",
                               description="fsspec URL that screenshot 'ref' keys are relative to")
    max_concurrency: int = Field(default=4, ge=1)
    max_body_bytes: int = 256 * 1024 * 1024
    log_level: str = "INFO"
