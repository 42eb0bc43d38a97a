"""Task readiness (worker/tasks/readiness.py): the title of the task's ready window."""

from __future__ import annotations

from pathlib import Path

from coda.tasks import TaskSpec, load_task_file
from worker.tasks.readiness import ready_titles

ROOT = Path(__file__).resolve().parents[2]


def test_ready_titles_name_the_opened_files_else_the_app() -> None:
    tex = load_task_file(ROOT / "examples/scienceboard/VM/TeXstudio/C-02.json")
    assert ready_titles(tex) == ["main.tex"]
    kalgebra = load_task_file(ROOT / "examples/scienceboard/VM/KAlgebra/A-01.json")
    assert ready_titles(kalgebra) == ["KAlgebra"]  # LD_LIBRARY_PATH=/x/6.5.0/... is no file
    bare = TaskSpec(id="x", app="xterm", instruction="do it")
    assert ready_titles(bare) == ["xterm"]
