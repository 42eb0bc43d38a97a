"""Fixtures of the embedded-server tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coda_app.embedded import EmbeddedServices
from tests.fixtures.infra import embedded_data_dir


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A fresh data dir (see tests.fixtures.infra.embedded_data_dir for why not tmp_path)."""
    with embedded_data_dir() as path:
        yield path


@pytest.fixture
def services() -> Iterator[EmbeddedServices]:
    with EmbeddedServices() as started:
        yield started
