"""Store URLs: the one Postgres URL normaliser and the redaction used in logs and messages.

Postgres URLs arrive in every form users write (``postgres://``, ``postgresql://``,
``postgresql+asyncpg://``, ``postgresql+psycopg://``). SQLAlchemy and Alembic want the
``postgresql+asyncpg://`` form, asyncpg and libpq the plain ``postgresql://`` one.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

POSTGRES_SCHEMES = ("postgres", "postgresql")


def redact_url(url: str) -> str:
    """The URL with its password replaced by ***, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def postgres_url(url: str, *, driver: str | None = "asyncpg") -> str:
    """Normalise a Postgres URL: ``postgresql+<driver>://...`` (SQLAlchemy form, the default
    driver asyncpg) or, with ``driver=None``, ``postgresql://...`` (libpq / asyncpg form).
    Anything that is not a Postgres URL is a ValueError naming it (password redacted)."""
    scheme, sep, rest = url.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if not sep or base not in POSTGRES_SCHEMES:
        raise ValueError(f"database url must start with postgresql:// (got {redact_url(url)!r})")
    return f"postgresql+{driver}://{rest}" if driver else f"postgresql://{rest}"


def to_asyncpg_url(url: str) -> str:
    """``postgresql+asyncpg://...``: the form SQLAlchemy and Alembic take."""
    return postgres_url(url)


def to_plain_postgres_url(url: str) -> str:
    """``postgresql://...``: the form asyncpg and libpq take."""
    return postgres_url(url, driver=None)
