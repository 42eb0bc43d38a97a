"""This machine's ChimeraX, built from RBVI's sources by ``scripts/chimerax.sh``: the build's
key as the script computes it, and the build itself, offline: REST remote control answers
``info models``, ``open 3ppd`` comes from ScienceBoard's fetch cache, SessionStates is installed
(``toolshed list`` shows ``SessionStates (0.4)``, ScienceBoard's harness looks for it) and its
``states`` command writes the dump ScienceBoard's checkers read. Without a build these skip
(fail under CI=true) naming ``bash scripts/chimerax.sh``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from worker.providers.image import chimerax as build

from .chimerax_helpers import DATA, Rest, chimerax, require_build


def test_the_key_is_the_script_s() -> None:
    shell = (f'CX=$(sed -n "s/^CX_SHA256=//p" {build.SCRIPT}); '
             f'ST=$(sed -n "s/^STATES_SHA256=//p" {build.SCRIPT}); '
             f'{{ echo "$CX $ST"; cat {build.SCRIPT}; }} | sha256sum | cut -c1-12')
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == build.key()
    assert build.launcher().parent.parent == build.prefix()


def test_without_the_script_there_is_no_build(tmp_path: Path) -> None:
    assert build.key(tmp_path / "chimerax.sh") == "none"
    assert not build.is_built({"CODA_CHIMERAX_DIR": str(tmp_path)})


def test_the_fetch_cache_is_scienceboard_s_unmodified() -> None:
    readme = (DATA / "README.md").read_text()
    sums = dict((name, digest) for digest, name in
                (line.split() for line in readme.splitlines()
                 if len(line.split()) == 2 and len(line.split()[0]) == 64))
    from worker.tasks.adapters import chimerax as adapter

    files = adapter.cache_files()
    assert sorted(files) == sorted(sums)
    for name, digest in sums.items():
        assert hashlib.sha256(files[name].read_bytes()).hexdigest() == digest, name


@pytest.fixture(scope="module")
def prefix() -> Path:
    return require_build()


def test_sessionstates_is_installed(prefix: Path, tmp_path: Path) -> None:
    done = subprocess.run([str(prefix / build.LAUNCHER), "--nogui", "--exit", "--cmd",
                           "toolshed list"], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL, env={"HOME": str(tmp_path),
                                                         "PATH": "/usr/bin:/bin"})
    assert "SessionStates (0.4)" in done.stdout + done.stderr, done.stdout[-2000:]


def _rest_round(rest: Rest, home: Path) -> None:
    assert rest.run("info models")["error"] is None
    opened = rest.run("open 3ppd")
    assert opened["error"] is None, opened
    models = rest.run("info models")
    assert "3ppd" in json.dumps(models), models
    stamp = str(int(time.time() * 1000))
    out = home / "Downloads"
    assert rest.run(f"states {out} {stamp}")["error"] is None
    dump = json.loads((out / f"{stamp}.json").read_text())
    assert dump["_state_containers.models._models.(1,)._name"] == "3ppd"


def test_rest_open_from_the_cache_and_a_states_dump(prefix: Path, tmp_path: Path) -> None:
    with chimerax(prefix, tmp_path) as rest:
        _rest_round(rest, tmp_path)


def test_the_gui_under_xvfb(prefix: Path, tmp_path: Path) -> None:
    if shutil.which("Xvfb") is None:
        pytest.skip("no Xvfb")
    read, write = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1280x800x24",
                             "-nolisten", "tcp"], pass_fds=(write,),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        with os.fdopen(read) as f:
            display = ":" + f.readline().strip()
        with chimerax(prefix, tmp_path, display=display) as rest:
            _rest_round(rest, tmp_path)
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=10)


class _Guest:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def upload(self, path: str, data: bytes) -> None:
        self.files[path] = data


class _Ctx:
    def __init__(self) -> None:
        self.guest = _Guest()

    def rw(self, path: str) -> str:
        return path.replace("/home/user", "/slot/home")


def test_a_02_s_download_copies_the_cached_entry_and_nothing_else_is_fetched() -> None:
    from coda.tasks import SetupStep
    from worker.tasks.adapters import chimerax as adapter
    from worker.tasks.context import StepError

    ctx = _Ctx()
    step = SetupStep.model_validate({"func": "download", "path": "/home/user/Downloads/prot.cif",
                                     "url": "https://files.rcsb.org/download/3ppd.cif"})
    assert "3ppd.cif" in adapter.step_download(ctx, step)  # type: ignore[arg-type]
    assert ctx.guest.files["/slot/home/Downloads/prot.cif"] == (
        DATA / "Downloads" / "ChimeraX" / "PDB" / "3ppd.cif").read_bytes()
    other = SetupStep.model_validate({"func": "download", "path": "/home/user/x.cif",
                                      "url": "https://files.rcsb.org/download/9xyz.cif"})
    with pytest.raises(StepError):
        adapter.step_download(ctx, other)  # type: ignore[arg-type]
    assert adapter.place_fetch_cache(ctx) == 11  # type: ignore[arg-type]
    assert "/slot/home/Downloads/ChimeraX/PDB/102l.cif" in ctx.guest.files
    assert "/slot/home/Downloads/ChimeraX/AlphaFold/AF-A8Z1J3-F1-model_v4.cif" in ctx.guest.files
    assert "/slot/home/Downloads/ChimeraX/AlphaFold/alphafold_database.json" in ctx.guest.files
