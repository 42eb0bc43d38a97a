"""Planner service settings (environment variables prefixed ``CODA_PLANNER_``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from coda.inference.spec import BackendSpec
from coda.modelservice.settings import ModelServiceSettings


class PlannerSettings(ModelServiceSettings, BackendSpec):
    """The planner model (:class:`BackendSpec` fields), its adapters, the service's limits."""

    model_config = SettingsConfigDict(env_prefix="CODA_PLANNER_", extra="ignore")

    port: int = Field(default=8001, ge=1, le=65535)
    model: str = Field(default="Qwen/Qwen2.5-VL-32B-Instruct", min_length=1,
                       description="local model path (transformers) or served model name")
    adapter_cache_dir: str = Field(default=".coda/adapters",
                                   description="copies of adapters read from the artifact store")
    adapter_roots: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="local directories adapters may also be loaded from in place "
                    "(comma-separated absolute paths); none by default")
    max_adapter_bytes: int = Field(default=4 * 1024**3, ge=1024,
                                   description="size of one adapter copied from the store")
    max_turns: int = Field(default=15, ge=0, description="past turns in the context")
    keep_images: int = Field(default=1, ge=0, description="past screenshots kept in context")
    max_concurrency: int = Field(default=8, ge=1)

    @field_validator("adapter_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [r.strip() for r in value.split(",") if r.strip()]
        return value
