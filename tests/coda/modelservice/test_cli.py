"""Starting a model service: clear refusals for what a user can fix, real errors as they are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import typer.main

from coda.modelservice.cli import serve
from coda.modelservice.imports import missing_package
from coda.modelservice.settings import DefaultSecretError
from planner_service.settings import PlannerSettings

ROOT = Path(__file__).resolve().parents[3]


def test_missing_package_tells_an_absent_extra_from_a_real_error() -> None:
    absent = ModuleNotFoundError("No module named 'surely_absent_pkg'", name="surely_absent_pkg")
    assert missing_package(absent) == "surely_absent_pkg"
    assert missing_package(ModuleNotFoundError("x", name="surely_absent_pkg.sub")) == (
        "surely_absent_pkg")
    # our own modules, a present package's missing submodule, a bad name: real errors
    assert missing_package(ModuleNotFoundError("x", name="planner_service.nope")) is None
    assert missing_package(ModuleNotFoundError("x", name="fastapi.nope")) is None
    assert missing_package(ImportError("cannot import name 'x' from 'fastapi'")) is None


def _settings() -> PlannerSettings:
    return PlannerSettings(backend="openai", base_url="http://127.0.0.1:9/v1")


def _raise(exc: BaseException) -> object:
    raise exc


def test_serve_reports_a_missing_extra(capsys: pytest.CaptureFixture[str]) -> None:
    gone = ModuleNotFoundError("No module named 'surely_absent_pkg'", name="surely_absent_pkg")
    with pytest.raises(typer.Exit) as info:
        serve(_settings, lambda _: _raise(gone))
    assert info.value.exit_code == 2
    assert "'surely_absent_pkg' package is missing" in capsys.readouterr().err


def test_serve_raises_a_real_import_error() -> None:
    with pytest.raises(ImportError, match="cannot import name 'plan'"):
        serve(_settings, lambda _: _raise(ImportError("cannot import name 'plan'")))


def test_serve_refuses_default_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as info:
        serve(_settings, lambda _: _raise(DefaultSecretError("refusing to start: X")))
    assert info.value.exit_code == 2 and "refusing to start" in capsys.readouterr().err


@pytest.mark.parametrize("role", ["planner", "executor", "judge"])
def test_service_refuses_default_tokens_outside_dev_mode(role: str) -> None:
    prefix = f"CODA_{role.upper()}_"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODA_")}
    env.update({f"{prefix}BACKEND": "openai", f"{prefix}BASE_URL": "http://127.0.0.1:9/v1",
                "CODA_JUDGE_MODELS": '[{"name": "j", "backend": "openai", '
                                     '"base_url": "http://127.0.0.1:9/v1", "model": "m"}]'})
    out = subprocess.run([sys.executable, "-m", "coda_app.cli", role, "--port", "9"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "refusing to start" in out.stderr and f"{prefix}ADMIN_TOKEN" in out.stderr


_HOOK = """
import importlib.abc, sys
class Broken(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "planner_service.cli":
            raise {exc}
sys.meta_path.insert(0, Broken())
from coda_app.cli import app
app(["planner", "--help"])
"""


def test_coda_cli_reports_a_real_import_error_as_such() -> None:
    hook = _HOOK.format(exc="ImportError('cannot import name parse_plan (a real bug)')")
    out = subprocess.run([sys.executable, "-c", hook], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode != 0
    assert "a real bug" in out.stderr and "not available" not in out.stderr + out.stdout


def test_coda_cli_reports_a_missing_extra_as_not_installed() -> None:
    hook = _HOOK.format(exc="ModuleNotFoundError('No module named absent_extra', "
                            "name='absent_extra')")
    hook = hook.replace('app(["planner", "--help"])', 'app(["planner"])')
    out = subprocess.run([sys.executable, "-c", hook], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert "coda planner is not available" in " ".join((out.stderr + out.stdout).split())


def _serve_flags(app: typer.Typer) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """The options of a service's serve command: name -> (flags, help)."""
    command = typer.main.get_command(app)
    return {p.name or "": (tuple(p.opts), getattr(p, "help", None)) for p in command.params
            if p.name not in ("install_completion", "show_completion")}  # Typer's own


def test_the_three_services_serve_with_the_same_flags() -> None:
    from executor_service.cli import app as executor
    from judge_service.cli import app as judge
    from planner_service.cli import app as planner

    flags = {name: _serve_flags(app) for name, app in
             (("planner", planner), ("executor", executor), ("judge", judge))}
    assert flags["planner"] == flags["executor"]  # both run one model: its backend's flags too
    common = {"host", "port", "log_level"}
    assert set(flags["judge"]) == common  # the judge's models are a list (CODA_JUDGE_MODELS)
    assert {k: flags["planner"][k] for k in common} == flags["judge"]
    assert set(flags["planner"]) == common | {"backend", "model", "base_url", "device",
                                              "max_pixels"}
    assert flags["planner"]["base_url"][0] == ("--base-url",)
