"""The tokens of a local ``coda up``: ``secrets.json`` in its data dir (a :class:`LocalSecrets`),
written once on first start, private from its first byte (created mode 0600, never wider), and
read back by the commands that talk to that master."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr

FILE_NAME = "secrets.json"
FILE_MODE = 0o600


def _token() -> SecretStr:
    return SecretStr(secrets.token_urlsafe(24))


class LocalSecrets(BaseModel):
    """The local stack's tokens: the master's admin and worker tokens, the model services'
    inference and admin tokens (a token missing from an older file is made on reading)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    admin_token: SecretStr = Field(default_factory=_token)
    worker_token: SecretStr = Field(default_factory=_token)
    service_token: SecretStr = Field(default_factory=_token)
    service_admin_token: SecretStr = Field(default_factory=_token)

    def to_json(self) -> str:
        return json.dumps({name: getattr(self, name).get_secret_value()
                           for name in type(self).model_fields}, indent=2)


def secrets_path(home: Path) -> Path:
    return home / FILE_NAME


def _read(path: Path) -> LocalSecrets:
    return LocalSecrets.model_validate_json(path.read_text())


def _write(path: Path, values: LocalSecrets) -> None:
    """Write ``values`` to ``path`` through a file created with mode 0600 (os.open, O_EXCL:
    never a moment readable by others, whatever the umask) and renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write(values.to_json())
    os.replace(tmp, path)


def local_secrets(home: Path) -> LocalSecrets:
    """The local tokens: made and written on first start, kept after (an older file without
    the services' tokens is completed once)."""
    path = secrets_path(home)
    if path.exists():
        values = _read(path)
        if values.model_fields_set == set(LocalSecrets.model_fields):
            return values
    else:
        home.mkdir(parents=True, exist_ok=True)
        values = LocalSecrets()
    _write(path, values)
    return values


def admin_token(token: str | None, home: Path) -> str | None:
    """The admin token to send: the one given, else $CODA_ADMIN_TOKEN, else the local
    ``coda up``'s (None when there is none)."""
    if token:
        return token
    if os.environ.get("CODA_ADMIN_TOKEN"):
        return os.environ["CODA_ADMIN_TOKEN"]
    path = secrets_path(home)
    return _read(path).admin_token.get_secret_value() if path.exists() else None
