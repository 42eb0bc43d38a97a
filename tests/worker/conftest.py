"""Desktop fixtures: real Xvfb displays, window manager, guest agents and applications, one
local provider per test module (``desktop_host`` in tests/fixtures/desktops.py checks the
packages first)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from worker.providers.local import LocalDesktop, LocalProvider


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
