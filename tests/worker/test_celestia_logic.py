"""The Celestia adapter's pure parts: the task's query, the answers this build's data cannot
give, the main window, and the build's key as scripts/celestia.sh computes it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from coda.contracts.desktop import WindowInfo
from coda.tasks import load_task_file
from worker.providers.image import celestia as build
from worker.tasks.adapters.celestia import app
from worker.tasks.adapters.celestia.adapter import data_blocker, query

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "Celestia"


def test_the_query_is_the_task_s_entities() -> None:
    assert query(load_task_file(TASKS / "B-06.json")) == [{"name": "Sirius A", "type": 1}]
    assert query(load_task_file(TASKS / "A-01.json")) == []


def test_answers_only_the_vm_s_data_gives_are_named() -> None:
    blocked = {p.stem for p in sorted(TASKS.glob("*.json"))
               if data_blocker(load_task_file(p)) is not None}
    assert blocked == {"C-05", "C-06", "C-08", "C-09"}
    assert "2901 K" in (data_blocker(load_task_file(TASKS / "C-05.json")) or "")


def test_the_main_window_is_not_the_splash_screen() -> None:
    def window(title: str, width: int) -> WindowInfo:
        return WindowInfo(id=1, title=title, wm_class=["celestia-qt6", "celestia-qt6"],
                          pid=None, x=0, y=0, width=width, height=width * 3 // 4)

    assert app.is_main_window(window("Celestia", 1280))
    assert not app.is_main_window(window("Celestia", 600))
    assert not app.is_main_window(window("Set Time", 1280))


def test_the_key_is_the_script_s() -> None:
    shell = (f'FORK_SHA256=$(sed -n "s/^FORK_SHA256=//p" {build.SCRIPT}); '
             f'CONTENT_SHA256=$(sed -n "s/^CONTENT_SHA256=//p" {build.SCRIPT}); '
             f'{{ echo "$FORK_SHA256 $CONTENT_SHA256"; cat {build.PATCHES}/*.patch '
             f'{build.SCRIPT}; }} | sha256sum | cut -c1-12')
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == build.key()
    assert build.binary().parent.parent == build.prefix()


def test_without_the_script_there_is_no_build(monkeypatch, tmp_path) -> None:
    """The desktop image holds the worker package but not scripts/: importing it must work."""
    monkeypatch.setattr(build, "SCRIPT", tmp_path / "celestia.sh")
    monkeypatch.delenv(build.KEY_ENV, raising=False)
    build.key.cache_clear()
    try:
        assert build.key() == "none"
        assert not build.is_built({"CODA_CELESTIA_DIR": str(tmp_path)})
    finally:
        build.key.cache_clear()


def test_the_image_names_the_build_it_copied(monkeypatch, tmp_path) -> None:
    """In the desktop image (no scripts/) the key is the image's CODA_CELESTIA_KEY: the host's
    build, copied to the path it was compiled for, is found there."""
    monkeypatch.setattr(build, "SCRIPT", tmp_path / "celestia.sh")
    monkeypatch.setenv(build.KEY_ENV, "0123456789ab")
    env = {"CODA_CELESTIA_DIR": str(tmp_path)}
    build.key.cache_clear()
    try:
        assert build.prefix(env) == tmp_path / "0123456789ab"
        (tmp_path / "0123456789ab" / "bin").mkdir(parents=True)
        (tmp_path / "0123456789ab" / ".built").touch()
        binary = build.binary(env)
        binary.touch(mode=0o755)
        assert build.is_built(env)
    finally:
        build.key.cache_clear()
