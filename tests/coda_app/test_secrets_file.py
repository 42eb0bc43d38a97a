"""The local ``coda up`` tokens (coda_app/secrets_file.py): written once, private, read back."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from coda_app.secrets_file import admin_token, local_service_tokens, local_tokens


def test_tokens_are_written_once_private_and_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = local_tokens(home)
    path = home / "secrets.json"
    assert set(first) == {"admin_token", "worker_token"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert local_tokens(home) == first  # the next start keeps them
    full = local_service_tokens(home)
    assert {k: full[k] for k in first} == first
    assert {"service_token", "service_admin_token"} <= set(full)
    assert json.loads(path.read_text()) == full
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert local_service_tokens(home) == full


def test_admin_token_prefers_the_given_one_then_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODA_ADMIN_TOKEN", raising=False)
    assert admin_token(None, tmp_path) is None  # no local coda up, nothing set
    written = local_tokens(tmp_path)["admin_token"]
    assert admin_token(None, tmp_path) == written
    monkeypatch.setenv("CODA_ADMIN_TOKEN", "from-env")
    assert admin_token(None, tmp_path) == "from-env"
    assert admin_token("given", tmp_path) == "given"
