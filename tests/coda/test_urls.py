"""coda.urls: the one Postgres URL normaliser."""

from __future__ import annotations

import pytest

from coda.urls import redact_url, to_asyncpg_url, to_plain_postgres_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u@h:1/d", "postgresql+asyncpg://u@h:1/d"),
        ("postgres://u@h/d", "postgresql+asyncpg://u@h/d"),
        ("postgresql+asyncpg://u@h/d", "postgresql+asyncpg://u@h/d"),
        (
            "postgresql+psycopg://u@h/d?sslmode=disable",
            "postgresql+asyncpg://u@h/d?sslmode=disable",
        ),
    ],
)
def test_to_asyncpg_url(url: str, expected: str) -> None:
    assert to_asyncpg_url(url) == expected
    assert to_plain_postgres_url(url) == "postgresql://" + expected.split("://", 1)[1]


@pytest.mark.parametrize("url", ["mysql://u@h/d", "redis://h/0", "not a url"])
def test_to_asyncpg_url_rejects_other_schemes(url: str) -> None:
    with pytest.raises(ValueError, match="postgresql://"):
        to_asyncpg_url(url)


def test_redact_url_hides_the_password_only() -> None:
    assert redact_url("postgresql://u:secret@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    with pytest.raises(ValueError, match=r"\*\*\*") as err:
        to_asyncpg_url("mysql://u:secret@h/d")
    assert "secret" not in str(err.value)
