"""Desktop fixtures: real Xvfb displays, window manager, guest agents and applications.

The test command installs the packages (scripts/desktop-deps.sh) where it can; without them
these tests skip with one line, except under CI=true, where a missing piece is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from worker.providers.image import missing_packages
from worker.providers.local import LocalDesktop, LocalProvider


@pytest.fixture(scope="session")
def desktop_host() -> None:
    """Skip (or, under CI, fail) when the slot image's packages are not installed here."""
    missing = missing_packages()
    if missing:
        line = (f"desktop packages missing: {', '.join(missing)} "
                "(run 'sudo bash scripts/desktop-deps.sh')")
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(line)
        pytest.skip(line)


@pytest.fixture(scope="module")
def provider(desktop_host: None) -> Iterator[LocalProvider]:
    """One local provider per test module; every display, agent and app is stopped after."""
    with LocalProvider() as p:
        yield p


@pytest.fixture(scope="module")
def desktop(provider: LocalProvider) -> LocalDesktop:
    """Slot 0 of the module's provider, started (tests reset it as they need)."""
    d = provider.desktop(0)
    d.reset()
    assert isinstance(d, LocalDesktop)
    return d
