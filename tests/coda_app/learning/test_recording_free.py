"""``coda learn --executor ocr --judge rules``: the closed loop with no recording in the loop
(issue 37). A short real run: one KAlgebra curriculum, local Xvfb desktops, the master, the
worker, the OCR executor, the rule-based judge, the trainer, and the tiny planner as it is (no
warm-up: the warm-up records the curricula's plans). It must complete, write no
``recordings/`` folder, and say in its result which executor and judge ran. That the planner
learns is ``test_closed_loop.py``'s (recorded executor and judge) and the benchmark's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from coda_app.learning.run import ClosedLoop
from coda_app.learning.settings import (
    CURRICULA,
    OCR_EXECUTOR,
    RULES_JUDGE,
    LearnSettings,
)

pytestmark = pytest.mark.slow


async def test_a_run_with_the_general_models_reads_no_recording(
        desktop_host: None, tiny_model_dir: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "curricula"
    tasks.mkdir()
    text = (CURRICULA / "kalgebra-C-06.json").read_text().replace(
        "../scienceboard", str(CURRICULA.parent / "scienceboard"))
    (tasks / "kalgebra-C-06.json").write_text(text)
    settings = LearnSettings(
        home=tmp_path / "home", run_name="general", tasks=tasks, updates=1, rollouts=2,
        slots=2, max_steps=2, group_size=2, max_idle_rounds=1, warm_up=False,
        planner_model=str(tiny_model_dir), executor=OCR_EXECUTOR, judge=RULES_JUDGE)
    loop = ClosedLoop(settings)
    try:
        result = await loop.run()
    finally:
        shutil.rmtree(loop.run_dir / "desktops", ignore_errors=True)
    assert result.curve and result.curve[0].rollouts == 2, result.curve
    assert result.executor.backend == "ocr" and result.judge_backend == "rules"
    assert result.recording_free and not result.executor.files
    assert result.executor_unchanged
    assert not (loop.run_dir / "recordings").exists()
    assert not (loop.run_dir / "warm-up").exists()
    written = (loop.run_dir / "result.json").read_text()
    assert '"backend": "ocr"' in written and '"judge_backend": "rules"' in written
