"""Executor service settings (environment prefix ``CODA_EXECUTOR_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from coda.inference.spec import BackendSpec
from coda.modelservice.settings import ModelServiceSettings
from coda.uitars import MAX_PIXELS, MIN_PIXELS


class ExecutorSettings(ModelServiceSettings, BackendSpec):
    """The executor model (:class:`BackendSpec` fields) and how actions are grounded."""

    model_config = SettingsConfigDict(env_prefix="CODA_EXECUTOR_", extra="ignore")

    port: int = Field(default=8002, ge=1, le=65535)
    model: str = Field(default="ByteDance-Seed/UI-TARS-1.5-7B", min_length=1,
                       description="local model directory (transformers) or served model name")
    max_pixels: int = Field(
        default=MAX_PIXELS, gt=0,
        description="Qwen2.5-VL image budget; must match the model server's (coordinates "
                    "depend on it)")
    min_pixels: int = Field(default=MIN_PIXELS, gt=0)
    history_n: int = Field(default=5, ge=1, le=32,
                           description="screenshots per request, the current one included")
    language: str = "English"
    max_concurrency: int = Field(default=32, ge=1)
