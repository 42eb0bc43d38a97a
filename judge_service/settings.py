"""Judge service settings (environment variables prefixed ``CODA_JUDGE_``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from coda.contracts.services_api import ModelName
from coda.inference.spec import BackendKind, BackendSpec
from coda.modelservice.settings import ModelServiceSettings


class JudgeModelSpec(BackendSpec):
    """One judge model of the ensemble: a name and the backend that serves it, e.g.
    ``{"name": "qwen72b", "backend": "openai", "base_url": "http://vllm-judge:8000/v1",
    "model": "Qwen/Qwen2.5-VL-72B-Instruct"}``, or the rule-based judge
    (:mod:`judge_service.rules`, no model): ``{"name": "rules", "backend": "rules"}``."""

    name: ModelName = Field(description="name used in votes and in policy.models")
    backend: BackendKind | Literal["rules"] = Field(  # type: ignore[assignment]
        default="transformers",
        description="a model backend (see BackendSpec), or 'rules': the rule-based judge "
                    "(frames, actions and the task's checker verdict; no model)")

    @model_validator(mode="before")
    @classmethod
    def _rules_need_no_model(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("backend") == "rules":
            return {"model": "rules", **data}
        return data

    @property
    def is_rules(self) -> bool:
        return self.backend == "rules"


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
