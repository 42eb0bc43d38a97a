"""`coda executor` flags and settings."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from coda.modelservice.cli import settings_from_flags
from executor_service.cli import app
from executor_service.settings import ExecutorSettings


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODA_EXECUTOR_PORT", "9001")
    monkeypatch.setenv("CODA_EXECUTOR_MODEL", "from-env")
    settings = settings_from_flags(ExecutorSettings, port=None, model="from-flag",
                                   backend="openai", base_url="http://vllm:8000/v1", host=None)
    assert (settings.port, settings.model, settings.backend) == (9001, "from-flag", "openai")


def test_bad_flags_are_refused() -> None:
    with pytest.raises(typer.BadParameter, match="transformers"):
        settings_from_flags(ExecutorSettings, backend="vllm")
    with pytest.raises(typer.BadParameter, match="port"):
        settings_from_flags(ExecutorSettings, port=0)
    with pytest.raises(typer.BadParameter, match="base_url is required"):
        settings_from_flags(ExecutorSettings, backend="openai")
    result = CliRunner().invoke(app, ["--backend", "vllm"])
    assert result.exit_code == 2 and "backend" in result.output


def test_default_base_url_is_not_the_masters_port() -> None:
    assert ExecutorSettings().base_url is None
    assert ExecutorSettings().port == 8002
