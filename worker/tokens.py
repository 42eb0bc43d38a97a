"""The worker's secrets as the plain text it sends (bearer headers); one module below the
settings and the providers, which both need it."""

from __future__ import annotations

from pydantic import SecretStr


def secret_value(value: SecretStr | None) -> str | None:
    """The secret itself, for the one place that sends it (a bearer header); None stays None."""
    return value.get_secret_value() if value is not None else None
