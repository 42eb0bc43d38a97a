"""The local ``coda up`` tokens (coda_app/secrets_file.py): a typed file written once, private
from its creation, read back."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from coda_app import secrets_file
from coda_app.secrets_file import LocalSecrets, admin_token, local_secrets, secrets_path


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tokens_are_written_once_private_and_kept(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = local_secrets(home)
    path = secrets_path(home)
    assert set(json.loads(path.read_text())) == set(LocalSecrets.model_fields)
    assert _mode(path) == 0o600
    assert local_secrets(home) == first  # the next start keeps them
    assert len({v.get_secret_value() for v in first.model_dump().values()}) == 4
    assert [p.name for p in home.iterdir()] == [path.name]


def test_the_file_is_never_wider_than_0600_even_while_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Created 0600 (not chmod-ed after): a umask that allows everything changes nothing, and
    the file is private when its first byte is written."""
    seen: list[int] = []
    real_fdopen = os.fdopen

    def fdopen(fd: int, *args: object, **kw: object) -> object:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_fdopen(fd, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(secrets_file.os, "fdopen", fdopen)
    old = os.umask(0)
    try:
        local_secrets(tmp_path)
    finally:
        os.umask(old)
    assert seen == [0o600]
    assert _mode(secrets_path(tmp_path)) == 0o600


def test_an_older_file_gets_the_service_tokens_once(tmp_path: Path) -> None:
    path = secrets_path(tmp_path)
    path.write_text(json.dumps({"admin_token": "a", "worker_token": "w"}))
    path.chmod(0o644)
    got = local_secrets(tmp_path)
    assert (got.admin_token.get_secret_value(), got.worker_token.get_secret_value()) \
        == ("a", "w")
    assert _mode(path) == 0o600
    assert local_secrets(tmp_path) == got


def test_admin_token_prefers_the_given_one_then_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODA_ADMIN_TOKEN", raising=False)
    assert admin_token(None, tmp_path) is None  # no local coda up, nothing set
    written = local_secrets(tmp_path).admin_token.get_secret_value()
    assert admin_token(None, tmp_path) == written
    monkeypatch.setenv("CODA_ADMIN_TOKEN", "from-env")
    assert admin_token(None, tmp_path) == "from-env"
    assert admin_token("given", tmp_path) == "given"
