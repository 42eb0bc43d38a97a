"""Scripted solutions of ChimeraX tasks on this machine's build (``scripts/chimerax.sh``): the
commands a user types into ChimeraX's command line, either typed into the GUI's command line
through the guest agent (done when the Log shows them) or sent through the guest agent's
``/chimerax/run`` (ChimeraX's REST remote control runs a command as its command line does and
answers when it is done: its reply is the state to wait on); an answer task's solution asks
ChimeraX for the fact and answers what its log says."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from coda.actions import TypeText
from coda.contracts.desktop import EpisodeEnd
from coda.tasks import load_task_file
from tests.fixtures.waiting import wait_for
from tests.worker.helpers import Solution, then, wrong_fails_then_right_passes
from worker.providers.base import Desktop
from worker.tasks import TaskContext, run_setup
from worker.tasks.adapters.chimerax import states_dump

TASKS = Path(__file__).resolve().parents[2] / "examples" / "scienceboard" / "VM" / "ChimeraX"


def typed(*commands: str) -> Solution:
    """Type each command into ChimeraX's command line; done when ChimeraX has run it."""
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        for command in commands:
            reply = ctx.guest.chimerax(ctx.layout.portlike, command)
            assert reply.error is None, f"{command!r}: {reply.error}"
        return EpisodeEnd(kind="DONE")
    return solve


WAIT_S = 120.0


def log_text(ctx: TaskContext) -> str:
    """The text of ChimeraX's Log panel, from a fresh states dump (its ``page_source``)."""
    ctx.scratch.pop("chimerax_states", None)
    pages = [str(v) for k, v in states_dump(ctx).items() if k.endswith("page_source")]
    return " ".join(re.sub(r"<[^>]+>", " ", "".join(pages)).split())


def in_command_line(command: str) -> Solution:
    """Type ``command`` into ChimeraX's command line (it has the keyboard focus in ChimeraX's
    main window) and Enter; done when the Log shows it (ChimeraX logs a command as it runs
    it, on its GUI thread, which also answers the states dump: a dump that shows the command
    shows its output too). What a command typed in the GUI logs is in the Log panel, which
    B-07, D-01 and D-02's checkers read; the REST remote control's replies are not."""
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        before = len(log_text(ctx))
        result = desktop.act(TypeText(text=command + "\n"))
        assert result.ok, result.error
        wait_for(lambda: command in log_text(ctx)[before:], f"{command!r} in ChimeraX's Log",
                 WAIT_S, interval=0.5)
        return EpisodeEnd(kind="DONE")
    return solve


def ended(kind: Literal["DONE", "FAIL"]) -> Solution:
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        return EpisodeEnd(kind=kind)
    return solve


def opened(path: str) -> Solution:
    """Close what is open, then open the task's file (its path on this desktop)."""
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        return typed("close", f"open {ctx.rw(path)}")(desktop, ctx)
    return solve


def answer_from(command: str, pick: Callable[[str], str], *, first: str | None = None
                ) -> Solution:
    """Run ``first`` (if any), then ``command``, and answer what ``pick`` reads in the log
    ``command`` wrote."""
    def solve(desktop: Desktop, ctx: TaskContext) -> EpisodeEnd:
        if first is not None:
            typed(first)(desktop, ctx)
        reply = ctx.guest.chimerax(ctx.layout.portlike, command)
        assert reply.error is None, f"{command!r}: {reply.error}"
        return EpisodeEnd(kind="ANS", answer=pick("\n".join(reply.notes)))
    return solve


def residue_name(log: str) -> str:
    """``info residues /A:6`` logs ``residue id /A:6 name ASN ...``."""
    m = re.search(r"\bname (\w+)", log)
    assert m is not None, log
    return m.group(1)


def atom_count(log: str) -> str:
    """``info atoms <spec>`` logs one line per atom."""
    return str(sum(1 for line in log.splitlines() if line.startswith("atom id")))


NUCLEOTIDES = {"DA": "A", "DC": "C", "DG": "G", "DT": "T"}


def sequence(log: str) -> str:
    """The DNA sequence ``info residues /A`` logs (one ``residue id /A:n name DX`` a line;
    waters left out)."""
    names = re.findall(r"^residue id \S+ name (\w+)", log, re.M)
    return "".join(NUCLEOTIDES[n] for n in names if n in NUCLEOTIDES)


def measured(log: str, decimals: int) -> str:
    """The value a ``distance`` or ``angle`` logs (``...: 9.386Å``), rounded."""
    m = re.search(r": (-?[0-9]+\.[0-9]+)", log)
    assert m is not None, log
    return f"{float(m.group(1)):.{decimals}f}"


def number_after(word: str) -> Callable[[str], str]:
    """The number the log gives after ``word`` (``... num_pseudobonds 30``, ``29 hydrogen
    bonds found``)."""
    def pick(log: str) -> str:
        m = re.search(rf"\b{word} ([0-9]+)\b|\b([0-9]+) {word}\b", log)
        assert m is not None, log
        return m.group(1) or m.group(2)
    return pick


def two_decimals(log: str) -> str:
    return measured(log, 2)


# task: (checker families, wrong solution, right solution)
CASES: dict[str, tuple[list[str], Solution, Solution]] = {
    # fetch 2OLX (the model's name); wrong: another entry of the cache, then closed
    "A-01": (["states"], typed("open 1dns"), typed("close", "open 2olx")),
    # ball and stick (the drawing's bounds, which the balls' size sets); wrong: sticks
    "A-03": (["states"], typed("style stick"), typed("style ball")),
    # spheres coloured by chain (the bounds; ``info rescolor /A``); wrong: spheres only
    "A-04": (["states", "info"], typed("style sphere"), typed("color bychain")),
    # the standard orientation (the view's model-view matrix is the identity); wrong: the
    # view fitted to the models but not reoriented
    "A-06": (["states"], typed("view"), typed("view orient")),
    # grey background (the view's background colour); wrong: light grey
    "A-07": (["states"], typed("set bgColor lightgray"), typed("set bgColor grey")),
    # flat lighting (the lighting parameters); wrong: soft
    "A-08": (["states"], typed("lighting soft"), typed("lighting flat")),
    # ambient lighting (ChimeraX's "soft": ambient only, from many directions); wrong: full
    # (ambient and a key light with shadows)
    "A-09": (["states"], typed("lighting full"), typed("lighting soft")),
    # nucleotides as ladders (the structure's ladder parameters); wrong: stubs
    "A-11": (["states"], typed("nucleotides stubs"), typed("nucleotides ladder")),
    # no nucleotide styling left (keys that must be absent); wrong: ladders
    "A-10": (["states"], typed("nucleotides ladder"), typed("nucleotides atoms")),
    # the ligand selected and magenta (``info sel``, ``info rescolor /A``); wrong: coloured
    # but not selected
    "A-05": (["info"], typed("color ligand magenta"),
             typed("select ligand", "color sel magenta")),
    # residue /A:6's name (an answer); wrong: its neighbour /A:5's
    "C-01": (["stop"], answer_from("info residues /A:5", residue_name),
             answer_from("info residues /A:6", residue_name)),
    # the model's oxygen atoms (an answer); wrong: its nitrogen atoms
    "C-02": (["stop"], answer_from("info atoms N", atom_count),
             answer_from("info atoms O", atom_count)),
    # clashes with VDW overlap >= 0.3 (a 'clashes' model; the Log's "4 clashes"); wrong: the
    # default overlap, 0.6 (no clashes)
    "D-01": (["states"], in_command_line("clashes #1"),
             in_command_line("clashes #1 overlapCutoff 0.3")),
    # contacts within 3.0 A centre to centre (a 'contacts' model; the Log's "41 distances");
    # wrong: within 2.5 A
    "D-02": (["states"], in_command_line("contacts #1 distanceOnly 2.5"),
             in_command_line("contacts #1 distanceOnly 3.0")),
    # hydrogens added by steric criteria only (the Log's "termini: 61 hydrogens added");
    # wrong: by H-bond criteria too, the default (its Log says "16 hydrogen bonds" between);
    # right: those deleted, then added again by steric criteria
    "B-07": (["states"], in_command_line("addh"),
             then(in_command_line("delete H"), in_command_line("addh hbond false"))),
    # load ~/Downloads/prot.cif (the model's name); wrong: the same entry from the fetch cache
    "A-02": (["states"], typed("open 3ppd"), opened("/home/user/Downloads/prot.cif")),
    # axes through waters /A HOH 107 and 108: 4r0u has no HOH 108, so the agent must say it
    # cannot (stop FAIL); wrong: an axis through HOH 107's neighbours instead, and done
    "B-08": (["stop"], then(typed("define axis /A:106,107@O"), ended("DONE")),
             then(typed("info residues :HOH"), ended("FAIL"))),
    # H-bonds drawn 0.1 A thick (the H-bond group's pseudobond drawing: its name and 12 half
    # bonds, 6 H-bonds; the checker reads no radius); wrong: a looser distance tolerance,
    # 1.0 A (12 H-bonds)
    "B-02": (["states"], typed("hbonds radius 0.1 distSlop 1.0"),
             typed("~hbonds", "hbonds radius 0.1")),
    # H-bonds coloured rgb(139, 0, 0) within a 0.6 A tolerance (the drawing's colours: 10
    # H-bonds, 20 halves); wrong: the colour at the default tolerance, 0.4 A (6 H-bonds)
    "B-03": (["states"], typed("hbonds color rgb(139,0,0)"),
             typed("~hbonds", "hbonds color rgb(139,0,0) distSlop 0.6")),
    # the waters selected (``info sel``) and their centroid drawn with radius 1 (the centroid
    # model's atoms drawing: centre and radius); wrong: radius 2
    "B-04": (["states", "info"], typed("select :HOH", "define centroid sel radius 2"),
             typed("close #1.1", "define centroid sel radius 1")),
    # a colour key without border, with ticks (the key's attributes); wrong: ticks, with the
    # default border
    "B-05": (["states"], typed("key blue:0 white: red:1 ticks true"),
             typed("key border false ticks true")),
    # a scale bar 10 A long, 4 pixels thick (the scale bar label's width and height); wrong:
    # 5 pixels thick
    "B-06": (["states"], typed("scalebar 10 thickness 5"), typed("scalebar 10 thickness 4")),
    # chain A's DNA sequence, upper case (an answer); wrong: lower case
    "C-03": (["stop"], answer_from("info residues /A", lambda log: sequence(log).lower()),
             answer_from("info residues /A", sequence)),
    # the base pairs' bonds that plain styling shows (the toolbar's Nucleotides > Plain:
    # bases as atoms, where 3bna's file's 30 base-pair hydrogen bonds, the structure's
    # "hydrogen bonds" pseudobond group, show between them; an answer); wrong: the H-bonds
    # ChimeraX's hbonds finds between the strands instead (29; it replaces the group's bonds,
    # so the right solution opens the entry again)
    "C-05": (["stop"], answer_from("hbonds nucleic restrict cross", number_after("hydrogen")),
             answer_from("info models #1.1 attribute num_pseudobonds",
                         number_after("num_pseudobonds"),
                         first="close; open 3bna; nucleotides atoms; style nucleic stick")),
    # the distance between the two CD atoms, two decimals (an answer); wrong: three decimals
    "C-06": (["stop"], answer_from("distance @CD", lambda log: measured(log, 3)),
             answer_from("distance @CD", two_decimals, first="~distance")),
    # the angle OE1 (GLN 4), OXT, OE1 (GLN 3), two decimals (an answer); wrong: the angle at
    # OE1 (GLN 4) instead of at OXT
    "C-07": (["stop"], answer_from("angle /A:4@OXT /A:4@OE1 /A:3@OE1", two_decimals),
             answer_from("angle /A:4@OE1 /A:4@OXT /A:3@OE1", two_decimals)),
}


def setup_task(desktop: Desktop, name: str) -> TaskContext:
    """Task ``name`` set up from its file on a freshly reset slot."""
    task = load_task_file(TASKS / f"{name}.json")
    desktop.reset()
    ctx = TaskContext.for_desktop(desktop, task)
    report = run_setup(ctx)
    assert report.ok, report.first_problem
    return ctx


def wrong_then_right(desktop: Desktop, name: str) -> None:
    """Task ``name`` of :data:`CASES` set up from its file: its near miss fails, then its
    right solution (done on top, in the same ChimeraX) passes, judged by the task's own
    checkers of the families listed."""
    families, wrong, right = CASES[name]
    ctx = setup_task(desktop, name)
    wrong_fails_then_right_passes(desktop, ctx, families, wrong, right)
