"""Executor service settings (environment prefix ``CODA_EXECUTOR_``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from coda.uitars import MAX_PIXELS, MIN_PIXELS


class ExecutorSettings(BaseSettings):
    """Configuration of one executor service process."""

    model_config = SettingsConfigDict(env_prefix="CODA_EXECUTOR_", extra="ignore")

    backend: Literal["transformers", "openai"] = "transformers"
    """``transformers``: the model in-process; ``openai``: an OpenAI-compatible server (vLLM)."""
    model: str = "ByteDance-Seed/UI-TARS-1.5-7B"
    """Local model directory (transformers) or served model name (openai)."""
    base_url: str = "http://127.0.0.1:8000/v1"
    """OpenAI-compatible endpoint (openai backend only)."""
    api_key: SecretStr | None = None
    device: str = "cpu"
    dtype: str = "auto"
    request_timeout_s: float = Field(default=120.0, gt=0)
    retries: int = Field(default=3, ge=1, le=10)
    max_pixels: int = Field(default=MAX_PIXELS, gt=0)
    """Qwen2.5-VL image budget; must match the model server's, coordinates depend on it."""
    min_pixels: int = Field(default=MIN_PIXELS, gt=0)
    history_n: int = Field(default=5, ge=1, le=32)
    """Screenshots per request, the current one included."""
    language: str = "English"
    artifacts_url: str = "./.coda/artifacts"
    """Base directory / fsspec URL that bare artifact keys in ``ImageRef.ref`` are read from."""
    host: str = "127.0.0.1"
    port: int = Field(default=8002, ge=1, le=65535)
    max_concurrency: int = Field(default=32, ge=1)
    queue_timeout_s: float = Field(default=30.0, ge=0)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    log_level: str = "INFO"
