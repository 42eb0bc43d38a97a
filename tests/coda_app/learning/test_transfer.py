"""``coda learn``'s transfer task (issue 37 point 6): the last version is also measured on a
task outside the curricula. Only what the run refuses is tested here (no loop runs): a transfer
task needs the general executor and judge, and must not be one of the curricula's tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda_app.learning.curriculum import CurriculumError
from coda_app.learning.run import ClosedLoop
from coda_app.learning.settings import CURRICULA, OCR_EXECUTOR, RULES_JUDGE, LearnSettings

KALGEBRA = CURRICULA.parent / "scienceboard" / "VM" / "KAlgebra"
GENERAL = {"executor": OCR_EXECUTOR, "judge": RULES_JUDGE}


def test_a_task_outside_the_curricula_is_taken(tmp_path: Path) -> None:
    loop = ClosedLoop(LearnSettings(home=tmp_path, transfer=KALGEBRA / "C-04.json", **GENERAL))
    assert loop.transfer is not None and "harmonic series" in loop.transfer.instruction
    assert ClosedLoop(LearnSettings(home=tmp_path, **GENERAL)).transfer is None


@pytest.mark.parametrize("models", [{}, {"executor": OCR_EXECUTOR}, {"judge": RULES_JUDGE}])
def test_a_replayed_model_is_refused(models: dict[str, dict[str, str]], tmp_path: Path) -> None:
    with pytest.raises(CurriculumError, match="general executor and judge"):
        ClosedLoop(LearnSettings(home=tmp_path, transfer=KALGEBRA / "C-04.json", **models))


def test_a_curriculum_task_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CurriculumError, match="in the curricula"):
        ClosedLoop(LearnSettings(home=tmp_path, transfer=KALGEBRA / "C-01.json", **GENERAL))
    with pytest.raises(CurriculumError, match="transfer task"):
        ClosedLoop(LearnSettings(home=tmp_path, transfer=tmp_path / "none.json", **GENERAL))
