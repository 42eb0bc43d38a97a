"""The configuration reference is generated from the settings classes and must be current."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks import figures_doc
from coda_app.configdoc import render

ROOT = Path(__file__).resolve().parents[1]


def test_configuration_reference_is_current() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == render(), (
        "docs/configuration.md is stale: python -m coda_app.configdoc > docs/configuration.md")


def test_figures_page_is_current() -> None:
    committed = (ROOT / "docs" / "figures.md").read_text()
    assert committed == figures_doc.render(), (
        "docs/figures.md is stale: python -m benchmarks.figures_doc > docs/figures.md")


def test_every_figure_source_exists() -> None:
    """Each section of the figures page reads a JSON file that is committed."""
    for section in figures_doc.SECTIONS:
        assert (figures_doc.RESULTS / section.source).is_file(), section.source


def test_docs_name_existing_files() -> None:
    """Every relative link in the README and docs/ points at a file that exists."""
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}"


def test_docs_name_existing_paths() -> None:
    """Every `path/in/backticks` under one of the repository's own folders exists."""
    tops = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for path in re.findall(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.*-]+)+/?)`", page.read_text()):
            if path.split("/")[0] in tops and "*" not in path:
                assert (ROOT / path).exists(), f"{page.relative_to(ROOT)} names {path}"


def test_readme_is_a_front_door() -> None:
    """The README stays short: what CODA is, the quick start, where things go, links."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "bash scripts/up.sh" in readme and "bash scripts/test.sh" in readme
    index = (ROOT / "docs" / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not list {page.name}"
