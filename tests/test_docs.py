"""The configuration reference is generated from the settings classes and must be current."""

from __future__ import annotations

import json
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


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_a_section_name_an_existing_heading() -> None:
    """A link ``page.md#anchor`` from docs/ or the results' notes lands on a heading of that
    page (the fleet page links the generated figures' sections so)."""
    pages = [*sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "benchmarks" / "results").glob("*.md"))]
    for page in pages:
        for target, anchor in re.findall(r"\]\(([^)#:]+\.md)#([^)]+)\)", page.read_text()):
            headings = re.findall(r"^#+ (.+)$", (page.parent / target).read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, \
                f"{page.relative_to(ROOT)} links {target}#{anchor}: no such heading"


def _measured(data: object, key: str = "") -> list[float]:
    """The measured numbers with a fraction in a results JSON (not its configuration, its
    targets or the machine's load)."""
    if key in ("config", "policy", "cadence", "machine", "master_settings", "ratio_target"):
        return []
    if isinstance(data, dict):
        return [v for k, item in data.items() for v in _measured(item, k)]
    if isinstance(data, list):
        return [v for item in data for v in _measured(item, key)]
    return [data] if isinstance(data, float) and not data.is_integer() else []


def test_the_fleet_page_links_its_figures_instead_of_typing_them() -> None:
    """docs/fleet.md keeps the sizing and the procedures; no measured figure of fleet.json is
    typed there (they are generated onto docs/figures.md, the runs' story is in
    benchmarks/results/fleet.history.md)."""
    page = (ROOT / "docs" / "fleet.md").read_text()
    fleet = json.loads((figures_doc.RESULTS / "fleet.json").read_text())
    typed = {f"{v:g}" for v in _measured(fleet)
             if re.search(rf"(?<![\d.,]){re.escape(f'{v:g}')}(?![\d])", page)}
    assert not typed, f"docs/fleet.md types figures of fleet.json: {sorted(typed)}"
    assert "figures.md#a-fleet-" in page and "fleet.history.md" in page
