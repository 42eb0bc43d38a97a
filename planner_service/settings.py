"""Planner service settings (environment variables prefixed ``CODA_PLANNER_``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PlannerSettings(BaseSettings):
    """Where the planner model runs and how the service listens."""

    model_config = SettingsConfigDict(env_prefix="CODA_PLANNER_", env_file=".env",
                                      extra="ignore")

    backend: str = Field(default="transformers",
                         description="'transformers' (in-process) or 'openai' (vLLM / any "
                                     "OpenAI-compatible server)")
    model: str = Field(default="Qwen/Qwen2.5-VL-32B-Instruct",
                       description="local model path (transformers) or served model name")
    base_url: str | None = Field(default=None, description="OpenAI-compatible server URL")
    api_key: str | None = None
    device: str = "cpu"
    max_pixels: int | None = Field(default=None, description="image budget per screenshot")
    backend_timeout_s: float = 300.0
    backend_retries: int = 2
    host: str = "127.0.0.1"
    port: int = 8001
    artifacts_url: str = Field(default="file://./.coda/artifacts",
                               description="fsspec URL that screenshot 'ref' keys are relative to")
    adapter_cache_dir: str = Field(default=".coda/adapters",
                                   description="local copies of remote (fsspec) adapters")
    max_turns: int = Field(default=15, ge=0, description="past turns in the context")
    keep_images: int = Field(default=1, ge=0, description="past screenshots kept in context")
    max_concurrency: int = Field(default=8, ge=1)
    max_body_bytes: int = 64 * 1024 * 1024
    log_level: str = "INFO"

    def backend_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :func:`coda.inference.factory.make_backend`."""
        if self.backend == "openai":
            if not self.base_url:
                raise ValueError("CODA_PLANNER_BASE_URL is required with backend 'openai'")
            return {"base_url": self.base_url, "model": self.model, "api_key": self.api_key,
                    "timeout": self.backend_timeout_s, "retries": self.backend_retries}
        kw: dict[str, Any] = {"model_path": self.model, "device": self.device}
        if self.max_pixels is not None:
            kw["max_pixels"] = self.max_pixels
        return kw
