"""The tokens of a local ``coda up``: ``secrets.json`` in its data dir, written on first start
(mode 0600), and read back by the commands that talk to that master."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path


def local_tokens(home: Path) -> dict[str, str]:
    """Tokens for a local `coda up`, generated on first start and kept in the data dir."""
    path = home / "secrets.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    home.mkdir(parents=True, exist_ok=True)
    values = {"admin_token": secrets.token_urlsafe(24), "worker_token": secrets.token_urlsafe(24)}
    path.write_text(json.dumps(values, indent=2))
    path.chmod(0o600)
    return values


def admin_token(token: str | None, home: Path) -> str | None:
    """The admin token to send: the one given, else $CODA_ADMIN_TOKEN, else the local
    ``coda up``'s (None when there is none)."""
    if token:
        return token
    if os.environ.get("CODA_ADMIN_TOKEN"):
        return os.environ["CODA_ADMIN_TOKEN"]
    path = home / "secrets.json"
    return str(json.loads(path.read_text())["admin_token"]) if path.exists() else None


def local_service_tokens(home: Path) -> dict[str, str]:
    """The local tokens, with the model services' tokens added on first need."""
    values = local_tokens(home)
    if "service_token" not in values:
        values.update(service_token=secrets.token_urlsafe(24),
                      service_admin_token=secrets.token_urlsafe(24))
        path = home / "secrets.json"
        path.write_text(json.dumps(values, indent=2))
        path.chmod(0o600)
    return values
