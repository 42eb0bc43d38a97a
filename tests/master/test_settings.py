"""Master settings: tokens are secrets, defaults are refused outside dev mode, the test clock
exists only in dev mode, every Postgres URL form is accepted (pure, no server)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from master.clock import Clock
from master.settings import DefaultSecretError, MasterSettings

STRONG = "s" * 24


def test_tokens_are_secrets_and_defaults_are_refused_outside_dev() -> None:
    s = MasterSettings(admin_token=STRONG, worker_tokens=f"{STRONG}a, {STRONG}b")
    assert STRONG not in repr(s) and STRONG not in str(s.model_dump())
    assert s.tokens() == (STRONG, [f"{STRONG}a", f"{STRONG}b"])
    s.check_secrets()
    with pytest.raises(DefaultSecretError, match="CODA_ADMIN_TOKEN"):
        MasterSettings(worker_tokens=STRONG).check_secrets()
    with pytest.raises(DefaultSecretError, match="CODA_WORKER_TOKENS"):
        MasterSettings(admin_token=STRONG, worker_tokens="short").check_secrets()
    MasterSettings(dev=True).check_secrets()


def test_test_clock_only_in_dev_mode() -> None:
    with pytest.raises(ValidationError, match="test_clock"):
        MasterSettings(test_clock=True)
    assert MasterSettings(dev=True, test_clock=True).test_clock


@pytest.mark.parametrize("url", ["postgres://u:p@h/db", "postgresql://u:p@h/db",
                                 "postgresql+asyncpg://u:p@h/db",
                                 "postgresql+psycopg://u:p@h/db"])
def test_database_url_forms(url: str) -> None:
    assert MasterSettings(database_url=url).database_url == "postgresql+asyncpg://u:p@h/db"


def test_database_url_must_be_postgres() -> None:
    with pytest.raises(ValidationError, match=r"DATABASE_URL[\s\S]*u:\*\*\*@h") as err:
        MasterSettings(database_url="mysql://u:secret@h/db")
    assert "secret" not in str(err.value)  # the password is not echoed


def test_clock_moves_only_forward() -> None:
    clock = Clock()
    before = clock.now()
    assert (clock.advance(30) - before).total_seconds() >= 30
    assert clock.after(5) > clock.now()
    with pytest.raises(ValueError, match="advance_s"):
        clock.advance(-1)
