"""Planner service settings (environment variables prefixed ``CODA_PLANNER_``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, field_validator
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
    master_url: str | None = Field(
        default=None,
        description="the master's URL: when set, the service pulls the current planner version "
                    "(and the ones kept before it) from the master at start and on every poll, "
                    "so a restarted planner or vLLM serves it again; unset, versions only come "
                    "from POST /v1/adapters (the trainer's push)")
    master_token: SecretStr | None = Field(
        default=None, description="bearer token for the master's reads (none: public reads)")
    version_poll_s: float = Field(default=5.0, gt=0,
                                  description="seconds between two reads of the master's versions")
    keep_versions: int = Field(default=2, ge=1,
                               description="pulled versions kept loaded (the current one and "
                                           "the newest before it), as the trainer's keep_loaded")
    max_turns: int = Field(default=15, ge=0, description="past turns in the context")
    keep_images: int = Field(default=1, ge=0, description="past screenshots kept in context")
    max_concurrency: int = Field(default=8, ge=1)

    @field_validator("adapter_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [r.strip() for r in value.split(",") if r.strip()]
        return value

    def master_bearer(self) -> str | None:
        return self.master_token.get_secret_value() if self.master_token is not None else None
