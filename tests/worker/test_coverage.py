"""The task coverage report (library and ``coda tasks coverage``) on the bundled tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from worker.providers.image import celestia, chimerax, grassdata
from worker.tasks.coverage import coverage, local_blocker
from worker.tasks.coverage_cli import app

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard"
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "coverage-local.json"


def installed(program: str) -> str | None:
    if program == str(celestia.binary()):
        return program
    return f"/usr/bin/{program}" if program in {"kalgebra", "calgebra", "dbus-daemon",
                                                "texstudio", "pdflatex", "bibtex", "grass",
                                                "xterm", "wmctrl"} else None


@pytest.fixture(autouse=True)
def grass_data_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local image as the desktop set-up leaves it: GRASS GIS's stand-in data sets,
    Celestia and ChimeraX built (whether this machine built them is not what these tests are
    about)."""
    monkeypatch.setattr(grassdata, "is_built", lambda _: True)
    monkeypatch.setattr(celestia, "is_built", lambda env=None: True)
    monkeypatch.setattr(chimerax, "is_built", lambda env=None: True)


def test_kalgebra_gets_a_real_verdict_for_every_task() -> None:
    report = coverage(TASKS, which=installed)
    kalgebra = next(a for a in report.apps if a.app == "KAlgebra")
    assert (kalgebra.tasks, kalgebra.loaded, kalgebra.implemented) == (31, 31, 31)
    assert kalgebra.runnable == 31 and not kalgebra.reasons
    assert report.total.tasks == sum(a.tasks for a in report.apps) == 169
    assert report.total.runnable == sum(a.runnable for a in report.apps)


def test_chimerax_counts_its_build_s_tasks_with_the_reasons_for_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    (entry,) = coverage(TASKS / "VM" / "ChimeraX", which=installed).apps
    assert (entry.tasks, entry.loaded, entry.implemented, entry.runnable) == (29, 29, 29, 27)
    left = sorted(n for names in entry.reasons.values() for n in names)
    assert left == ["B-01", "D-03"]
    monkeypatch.setattr(chimerax, "is_built", lambda env=None: False)
    (entry,) = coverage(TASKS / "VM" / "ChimeraX", which=installed).apps
    assert entry.runnable == 0 and "bash scripts/chimerax.sh" in next(iter(entry.reasons))


def test_grass_reaches_the_target_with_the_reasons_for_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    report = coverage(TASKS / "VM" / "GrassGIS", which=installed)
    (grass,) = report.apps
    assert (grass.tasks, grass.loaded, grass.implemented, grass.runnable) == (34, 34, 34, 25)
    left = sorted(n for names in grass.reasons.values() for n in names)
    assert left == ["B-10", "B-12"] + [f"C-0{i}" for i in range(1, 8)]
    monkeypatch.setattr(grassdata, "is_built", lambda _: False)
    (grass,) = coverage(TASKS / "VM" / "GrassGIS", which=installed).apps
    assert grass.runnable == 0 and "scripts/desktop-deps.sh" in next(iter(grass.reasons))


def test_celestia_reaches_the_target_with_the_reasons_for_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    report = coverage(TASKS / "VM" / "Celestia", which=installed)
    (entry,) = report.apps
    assert (entry.tasks, entry.loaded, entry.implemented, entry.runnable) == (33, 33, 33, 29)
    left = sorted(n for names in entry.reasons.values() for n in names)
    assert left == ["C-05", "C-06", "C-08", "C-09"]
    assert all("VM data" in reason for reason in entry.reasons)
    monkeypatch.setattr(celestia, "is_built", lambda env=None: False)
    (entry,) = coverage(TASKS / "VM" / "Celestia", which=installed).apps
    assert entry.runnable == 0 and "scripts/celestia.sh" in next(iter(entry.reasons))


def test_a_missing_program_is_the_reason() -> None:
    report = coverage(TASKS / "VM" / "KAlgebra", which=lambda p: None)
    (entry,) = report.apps
    assert entry.runnable == 0
    assert any("not installed here: kalgebra" in r for r in entry.reasons)


def test_unknown_steps_and_files_that_do_not_load_are_counted(tmp_path: Path) -> None:
    (tmp_path / "Odd").mkdir()
    (tmp_path / "Odd" / "bad.json").write_text("{not json")
    task = json.loads((TASKS / "VM" / "KAlgebra" / "C-01.json").read_text())
    task["initialize"].append({"func": "teleport"})
    (tmp_path / "Odd" / "step.json").write_text(json.dumps(task))
    report = coverage(tmp_path, which=installed)
    assert (report.total.tasks, report.total.loaded, report.total.implemented) == (2, 1, 0)
    reasons = " | ".join(report.total.reasons)
    assert "does not load" in reasons and "setup step 'teleport'" in reasons


def test_launch_of_an_app_missing_from_the_image_blocks_a_task() -> None:
    from coda.tasks import load_task_file

    task = load_task_file(TASKS / "VM" / "TeXstudio" / "B-02.json")  # opens Celestia too
    assert local_blocker(task, installed) is None
    assert "celestia" in (local_blocker(
        task, lambda p: None if "celestia" in p else installed(p)) or "")


def test_cli_prints_the_table_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(app, [str(TASKS), "--provider", "local", "--json", "-"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["provider"] == "local" and data["total"]["tasks"] == 169
    target = tmp_path / "c.json"
    out = runner.invoke(app, [str(TASKS), "--json", str(target)])
    assert out.exit_code == 0, out.output
    assert "real verdict here" in out.output and "KAlgebra" in out.output
    assert json.loads(target.read_text())["total"]["tasks"] == 169
    bad = runner.invoke(app, [str(tmp_path / "nowhere")])
    assert bad.exit_code != 0


def test_committed_local_figures_are_the_local_image_s() -> None:
    committed = json.loads(RESULTS.read_text())
    fresh = coverage(TASKS, which=installed)
    assert committed["apps"] == fresh.model_dump()["apps"]
