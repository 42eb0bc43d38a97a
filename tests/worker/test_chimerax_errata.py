"""ChimeraX C-04's erratum (worker/tasks/adapters/chimerax.py ``ERRATA``): ScienceBoard expects
12 hydrogens on /A:1 of 4r0u, the residue carries 9. Counted here from the entry itself (the
file ScienceBoard's VM places, bundled in examples/), independently of ChimeraX; the GUI half
(this build's ``addh`` gives 9, and the corrected check passes it only with the errata on) is
in tests/worker/test_chimerax_tasks.py."""

from __future__ import annotations

from pathlib import Path

from coda.contracts.desktop import CheckResult, CheckStatus, EpisodeEnd
from coda.tasks import load_task_file
from worker.tasks import answer_errata
from worker.tasks.adapters import chimerax
from worker.tasks.checkers import ANSWER_ERRATA

ROOT = Path(__file__).resolve().parents[2]
ENTRY = ROOT / "examples/scienceboard/chimerax-data/Downloads/ChimeraX/PDB/4r0u.cif"
TASK = ROOT / "examples/scienceboard/VM/ChimeraX/C-04.json"

# threonine's heavy atoms as the first residue of a chain: its bonds with their orders (the
# carbonyl C also bonds the next residue's N), and each element's valence
BONDS = {("N", "CA"): 1, ("CA", "C"): 1, ("C", "O"): 2, ("CA", "CB"): 1, ("CB", "OG1"): 1,
         ("CB", "CG2"): 1, ("C", "next N"): 1}
THREONINE = ("N", "CA", "C", "O", "CB", "OG1", "CG2")
VALENCE = {"N": 3, "C": 4, "O": 2}


def residue_atoms(chain: str, seq: str) -> list[list[str]]:
    """The entry's atom_site rows of residue ``chain:seq`` (author numbering)."""
    rows = [line.split() for line in ENTRY.read_text().splitlines()
            if line.startswith(("ATOM", "HETATM"))]
    # columns: group id type atom alt comp asym entity seq ins x y z occ b charge auth_seq
    # auth_comp auth_asym auth_atom model
    return [r for r in rows if r[18] == chain and r[16] == seq]


def test_a_1_is_the_n_terminal_threonine_with_no_hydrogen_and_no_alternate_location() -> None:
    atoms = residue_atoms("A", "1")
    assert {r[5] for r in atoms} == {"THR"}
    assert sorted(r[3] for r in atoms) == sorted(THREONINE)
    assert all(r[2] != "H" for r in atoms) and {r[4] for r in atoms} == {"."}
    first = min(int(r[16]) for r in (line.split() for line in ENTRY.read_text().splitlines()
                                     if line.startswith("ATOM")) if r[18] == "A")
    assert first == 1  # no residue before it: its amino group is the chain's terminus


def test_protonated_it_carries_nine_hydrogens_not_twelve() -> None:
    # each heavy atom takes the hydrogens its valence leaves; the chain's terminal amino group
    # is charged at neutral pH, as ChimeraX's addh makes it (NH3+: one more)
    hydrogens = {atom: VALENCE[atom[0]] - sum(order for bond, order in BONDS.items()
                                              if atom in bond) for atom in THREONINE}
    hydrogens["N"] += 1
    assert hydrogens == {"N": 3, "CA": 1, "C": 0, "O": 0, "CB": 1, "OG1": 1, "CG2": 3}
    assert sum(hydrogens.values()) == 9


def test_the_erratum_applies_to_c_04_s_answer_only_with_the_errata_on() -> None:
    task = load_task_file(TASK)
    item = task.evaluators[0].model_dump()
    erratum = answer_errata.for_stop(task, item, ANSWER_ERRATA)
    assert erratum is not None and erratum in chimerax.ERRATA and erratum.task == "C-04"
    assert chimerax.blocker("ChimeraX/C-04") is None  # counted: its check runs
    scienceboard = CheckResult(type="stop", status=CheckStatus.FAIL,
                               detail="answer ['9'] != ['12']")
    fixed = answer_errata.apply(erratum, EpisodeEnd(kind="ANS", answer="9"), scienceboard)
    assert fixed.status is CheckStatus.PASS and "erratum C-04" in fixed.detail
    again = answer_errata.apply(erratum, EpisodeEnd(kind="ANS", answer="12"), scienceboard)
    assert again.status is CheckStatus.FAIL
    # a Celestia task with the same words is not ChimeraX's
    other = task.model_copy(update={"app": "Celestia"})
    assert answer_errata.for_stop(other, item, ANSWER_ERRATA) is None
