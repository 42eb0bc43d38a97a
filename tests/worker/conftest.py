"""Desktop fixtures: real Xvfb displays, window manager, guest agents and applications, one
local provider per test module (``desktop_host`` in tests/fixtures/desktops.py checks the
packages first); the replay model services and a master for the worker's episode tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.master import REPLAYS, MasterProcess
from tests.fixtures.services import Store, running_replays
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


@pytest.fixture(scope="module")
def replay_services(service_store: Store, tmp_path_factory: pytest.TempPathFactory,
                    ) -> Iterator[tuple[str, str]]:
    """Planner and executor services answering from the recorded outputs of the demo tasks
    (TeXstudio C-02, KAlgebra C-01, GRASS GIS A-03), as ``coda up --models replay`` serves
    them."""
    with running_replays(REPLAYS / "demo", service_store,
                         tmp_path_factory.mktemp("replay-services")) as urls:
        yield urls


@pytest.fixture
def wmaster(master_factory: Any, service_store: Store) -> MasterProcess:
    """A master whose artifact store is the one the model services read."""
    return master_factory(CODA_ARTIFACTS_URL=str(service_store.root),  # type: ignore[no-any-return]
                          CODA_MAX_UPLOAD_BYTES=str(16 * 1024 * 1024))
