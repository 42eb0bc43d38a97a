"""The one settings base of the model services (each adds its ``env_prefix`` and own fields).

Secrets: ``inference_tokens`` (plan / act / judge) and ``admin_token`` (adapter management)
are ``SecretStr``; outside ``dev`` mode a default or short token refuses to start, as the
master does. The model is a :class:`~coda.inference.spec.BackendSpec` (the planner and the
executor extend it with their settings; the judge holds a list of them).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from coda.imagerefs import ImageLimits

DEFAULT_INFERENCE_TOKEN = "change-me-inference"
DEFAULT_ADMIN_TOKEN = "change-me-admin"
MIN_SECRET_CHARS = 16
PILLOW_BOMB_PIXELS = 89_478_485


class DefaultSecretError(RuntimeError):
    """A default or weak token is configured outside development mode."""


class ModelServiceSettings(BaseSettings):
    """What every model service shares: listening address, tokens, artifact store, limits."""

    model_config = SettingsConfigDict(extra="ignore")
    role: ClassVar[str] = "model"

    host: str = "127.0.0.1"
    port: int = Field(default=8001, ge=1, le=65535)
    log_level: str = "INFO"
    dev: bool = Field(default=False, description="development mode: default tokens allowed")
    inference_tokens: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=lambda: [SecretStr(DEFAULT_INFERENCE_TOKEN)], min_length=1,
        description="bearer tokens for plan / act / judge (comma-separated)")
    admin_token: SecretStr = Field(default=SecretStr(DEFAULT_ADMIN_TOKEN),
                                   description="bearer token for adapter management")
    artifacts_url: str = Field(
        default="./.coda/artifacts",
        description="the artifact store screenshot keys are read from: a local directory or "
                    "an fsspec URL (s3://bucket/prefix, https://host/prefix)")
    artifact_timeout_s: float = Field(default=30.0, gt=0, description="per store read")
    max_image_pixels: int = Field(default=16_777_216, ge=1, le=PILLOW_BOMB_PIXELS // 2,
                                  description="screenshots above it are refused (413)")
    max_aspect_ratio: float = Field(default=50.0, ge=1, le=150)
    max_image_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    max_tokens: int = Field(default=4096, ge=1, le=32_768,
                            description="the largest sampling.max_tokens a request may ask for")
    max_concurrency: int = Field(default=8, ge=1)
    queue_timeout_s: float = Field(default=30.0, ge=0)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    request_timeout_s: float = Field(default=600.0, gt=0, description="server-side deadline")
    body_timeout_s: float = Field(default=30.0, gt=0, description="to receive a request body")

    @field_validator("inference_tokens", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @field_validator("artifacts_url")
    @classmethod
    def _one_form(cls, value: str) -> str:
        """``file://x`` and ``x`` are one local store: kept as the plain path."""
        value = value.strip()
        if not value:
            raise ValueError("artifacts_url: empty")
        return value[len("file://"):] if value.startswith("file://") else value

    def image_limits(self) -> ImageLimits:
        return ImageLimits(max_pixels=self.max_image_pixels,
                           max_aspect_ratio=self.max_aspect_ratio,
                           max_bytes=self.max_image_bytes)

    def tokens(self) -> dict[str, list[str]]:
        """Role -> bearer tokens (routes of the model accept both roles)."""
        return {"admin": [self.admin_token.get_secret_value()],
                "inference": [t.get_secret_value() for t in self.inference_tokens]}

    def check_secrets(self) -> None:
        """Refuse default or weak tokens unless ``dev`` is set."""
        if self.dev:
            return
        prefix = str(self.model_config.get("env_prefix", "")).upper()
        weak = {name for name, value in (
            ("ADMIN_TOKEN", self.admin_token.get_secret_value()),
            *(("INFERENCE_TOKENS", t.get_secret_value()) for t in self.inference_tokens),
        ) if value in (DEFAULT_ADMIN_TOKEN, DEFAULT_INFERENCE_TOKEN)
            or len(value) < MIN_SECRET_CHARS}
        if weak:
            names = ", ".join(f"{prefix}{n}" for n in sorted(weak))
            raise DefaultSecretError(
                f"refusing to start: {names} is a default or shorter than {MIN_SECRET_CHARS} "
                f"characters; set a real secret or {prefix}DEV=true for development")


def settings_env(settings: BaseSettings) -> dict[str, str]:
    """The environment variables that reproduce ``settings`` in another process."""
    prefix = str(settings.model_config.get("env_prefix", "")).upper()
    env: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        env[f"{prefix}{name}".upper()] = _env_value(value)
    return env


def _env_value(value: Any) -> str:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, SecretStr | str) for v in value):
        return ",".join(_plain(v) for v in value)  # the comma-separated lists
    return json.dumps(_plain(value))


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, BaseModel):
        return {k: _plain(getattr(value, k)) for k in type(value).model_fields
                if getattr(value, k) is not None}
    return value
