"""The configuration reference is generated from the settings classes and must be current."""

from __future__ import annotations

from pathlib import Path

from coda_app.configdoc import render

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_reference_is_current() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == render(), (
        "docs/configuration.md is stale: python -m coda_app.configdoc > docs/configuration.md")


def test_docs_name_existing_files() -> None:
    for doc in ("architecture.md", "configuration.md", "operations.md", "reproduce-table1.md"):
        assert (ROOT / "docs" / doc).is_file(), doc
