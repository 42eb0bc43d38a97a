"""The one settings base of the model services: tokens, secrets, one artifacts_url form."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from coda.inference.spec import BackendSpec
from coda.modelservice.settings import DefaultSecretError, ModelServiceSettings, settings_env
from executor_service.settings import ExecutorSettings
from judge_service.settings import JudgeModelSpec, JudgeSettings
from planner_service.settings import PlannerSettings

ALL = [PlannerSettings, ExecutorSettings, JudgeSettings]
GOOD = {"inference_tokens": "i" * 20, "admin_token": "a" * 20}


@pytest.mark.parametrize("cls", ALL)
def test_one_base_with_secret_tokens(cls: type[ModelServiceSettings]) -> None:
    settings = cls(**GOOD)
    assert isinstance(settings, ModelServiceSettings)
    assert isinstance(settings.admin_token, SecretStr)
    assert all(isinstance(t, SecretStr) for t in settings.inference_tokens)
    assert "a" * 20 not in repr(settings) and "i" * 20 not in repr(settings)
    assert settings.tokens() == {"admin": ["a" * 20], "inference": ["i" * 20]}


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("tokens", [{}, {"admin_token": "short"}, {"inference_tokens": "x,y"},
                                    {"admin_token": "change-me-admin"}])
def test_default_or_weak_tokens_refuse_to_start(cls: type[ModelServiceSettings],
                                                tokens: dict[str, str]) -> None:
    given = {**GOOD, **tokens} if tokens else {}  # {}: the defaults
    settings = cls(**given)
    with pytest.raises(DefaultSecretError, match="refusing to start") as info:
        settings.check_secrets()
    prefix = str(cls.model_config["env_prefix"])
    assert prefix in str(info.value) and f"{prefix}DEV=true" in str(info.value)
    cls(**given, dev=True).check_secrets()  # development mode allows them


@pytest.mark.parametrize("cls", [PlannerSettings, ExecutorSettings])
def test_backend_is_a_typed_spec(cls: type[BackendSpec]) -> None:
    settings = cls(backend="openai", base_url="http://vllm:8000/v1", api_key="k" * 20)
    spec = settings.spec()
    assert type(spec) is BackendSpec and spec.base_url == "http://vllm:8000/v1"
    with pytest.raises(ValidationError, match="'transformers', 'openai', 'replay' or 'ocr'"):
        cls(backend="vllm")
    with pytest.raises(ValidationError, match="base_url is required"):
        cls(backend="openai")


def test_judge_models_are_typed_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODA_JUDGE_MODELS", '[{"name": "q", "backend": "openai", '
                                            '"base_url": "http://v:8000/v1", "model": "m"}]')
    (spec,) = JudgeSettings().models
    assert isinstance(spec, JudgeModelSpec) and spec.spec().base_url == "http://v:8000/v1"
    monkeypatch.setenv("CODA_JUDGE_MODELS", '[{"name": "q", "backend": "openai", '
                                            '"options": {"base_url": "http://v"}}]')
    with pytest.raises(ValidationError):
        JudgeSettings()


@pytest.mark.parametrize("cls", ALL)
def test_sane_defaults(cls: type[ModelServiceSettings]) -> None:
    settings = cls()
    assert settings.port in (8001, 8002, 8003) and settings.port != 8000
    assert settings.artifacts_url == "./.coda/artifacts"
    assert settings.max_image_pixels < 89_478_485 // 2  # well below Pillow's bomb threshold


def test_executor_default_base_url_is_not_the_masters() -> None:
    assert ExecutorSettings().base_url is None


@pytest.mark.parametrize("url", ["file:///data/artifacts", "/data/artifacts"])
def test_artifacts_url_has_one_form(url: str) -> None:
    assert PlannerSettings(artifacts_url=url).artifacts_url == "/data/artifacts"
    assert ExecutorSettings(artifacts_url="s3://b/p").artifacts_url == "s3://b/p"


@pytest.mark.parametrize("settings", [
    PlannerSettings(adapter_roots=["/a", "/b"], **GOOD, backend="openai", base_url="http://x/v1"),
    ExecutorSettings(**GOOD, max_pixels=1000),
    JudgeSettings(**GOOD, models=[JudgeModelSpec(name="a", model="m", api_key="k" * 20)]),
], ids=["planner", "executor", "judge"])
def test_settings_env_round_trips(settings: ModelServiceSettings,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in settings_env(settings).items():
        monkeypatch.setenv(key, value)
    again = type(settings)()
    assert settings_env(again) == settings_env(settings)
