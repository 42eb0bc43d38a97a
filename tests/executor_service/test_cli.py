"""`coda executor` flags and settings."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from executor_service.cli import app, settings_from_flags


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODA_EXECUTOR_PORT", "9001")
    monkeypatch.setenv("CODA_EXECUTOR_MODEL", "from-env")
    settings = settings_from_flags(port=None, model="from-flag", backend="openai", host=None)
    assert (settings.port, settings.model, settings.backend) == (9001, "from-flag", "openai")


def test_bad_flags_are_refused() -> None:
    with pytest.raises(typer.BadParameter, match="transformers"):
        settings_from_flags(backend="vllm")
    with pytest.raises(typer.BadParameter, match="port"):
        settings_from_flags(port=0)
    result = CliRunner().invoke(app, ["--backend", "vllm"])
    assert result.exit_code == 2 and "--backend" in result.output
