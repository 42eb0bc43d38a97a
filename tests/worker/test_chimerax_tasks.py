"""ScienceBoard's ChimeraX tasks on this machine's build (``scripts/chimerax.sh``) in a local
slot, set up from their task files by the worker's own task code (the launch maps the tasks'
``chimerax`` to the build, starts it on a session bus of its own and waits for its REST port)
and judged by their own checkers: for each task a near miss typed into ChimeraX's command line
fails, then the right solution (typed on top, in the same ChimeraX) passes. A reset leaves no
ChimeraX or ``dbus-daemon`` of the slot behind. Without a build these skip naming
``bash scripts/chimerax.sh`` (fail under CI=true)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coda import procs
from coda.contracts.desktop import CheckVerdict, CommandReply, EpisodeEnd, StepStatus
from coda.tasks import SetupStep
from worker.providers.base import GuestLayout
from worker.providers.image import chimerax as build
from worker.providers.local import LocalDesktop
from worker.tasks import run_checkers
from worker.tasks.adapters import chimerax as adapter
from worker.tasks.context import StepError

from .chimerax_helpers import require_build
from .chimerax_tasks import CASES, answer_from, atom_count, setup_task, wrong_then_right

LAUNCH = ["chimerax", "--cmd", "remotecontrol rest start json true port «PORTLIKE»"]


@pytest.fixture(scope="module")
def _built(desktop_host: None) -> None:
    require_build()


@pytest.mark.parametrize("name", sorted(CASES))
def test_chimerax_task_wrong_then_right_on_the_real_chimerax(_built: None, desktop: LocalDesktop,
                                                             name: str) -> None:
    wrong_then_right(desktop, name)


def test_c_04_this_build_counts_nine_hydrogens_which_only_the_erratum_passes(
        _built: None, desktop: LocalDesktop) -> None:
    ctx = setup_task(desktop, "C-04")
    end = answer_from("info atoms /A:1 & H", atom_count, first="addh")(desktop, ctx)
    assert end == EpisodeEnd(kind="ANS", answer="9")
    assert run_checkers(ctx, end).verdict is CheckVerdict.FAILURE  # ScienceBoard's 12
    ctx.errata = True
    outcome = run_checkers(ctx, end)
    assert outcome.verdict is CheckVerdict.SUCCESS and "erratum C-04" in outcome.results[0].detail
    scienceboard = EpisodeEnd(kind="ANS", answer="12")
    assert run_checkers(ctx, scienceboard).verdict is CheckVerdict.FAILURE


def _slot_processes(desktop: LocalDesktop) -> dict[int, str]:
    """ChimeraX and dbus-daemon processes started for this slot (marked by its agent, or
    running with the slot's directory in their environment): pid -> command line."""
    found = {}
    for pid in procs.marked_pids(desktop.id) + _with_slot_env(desktop.dir):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if Path(argv[0]).name == "dbus-daemon" or any(
                "chimerax.core" in a or a.startswith(str(build.prefix())) for a in argv):
            found[pid] = " ".join(argv)
    return found


def _with_slot_env(slot_dir: Path) -> list[int]:
    needle = str(slot_dir).encode()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def test_the_launch_uses_the_slot_s_bus_and_a_reset_leaves_nothing_behind(
        _built: None, desktop: LocalDesktop) -> None:
    ctx = setup_task(desktop, "A-07")
    running = _slot_processes(desktop)
    assert any("chimerax" in c.lower() for c in running.values()), running
    assert any("dbus-daemon" in c for c in running.values()), running
    assert sum("dbus-daemon" in c for c in running.values()) == 1, running  # no autolaunch
    assert ctx.guest.chimerax(ctx.layout.portlike, "version").error is None
    desktop.reset()
    assert _slot_processes(desktop) == {}
    assert not [pid for pid in running if procs.alive(pid)]


class _Guest:
    def __init__(self) -> None:
        self.ran: list[object] = []

    def execute(self, command: object, **_: object) -> CommandReply:
        self.ran.append(command)
        return CommandReply(returncode=1, error="")

    def launch(self, command: object, **_: object) -> None:
        raise AssertionError("launched without a build")


class _Ctx:
    def __init__(self, programs: dict[str, str]) -> None:
        self.guest = _Guest()
        self.layout = GuestLayout(portlike=8123, programs=programs)
        self.launch_timeout_s = 60.0

    def rw(self, value: str) -> str:
        return self.layout.rewrite(value)


def test_without_a_build_the_launch_is_unavailable_and_names_the_script(tmp_path: Path) -> None:
    missing = str(tmp_path / "bin" / "chimerax")
    ctx = _Ctx({"chimerax": missing})
    step = SetupStep.model_validate({"func": "launch", "wait": 7.5, "command": LAUNCH})
    with pytest.raises(StepError) as err:
        adapter.step_launch(ctx, step)  # type: ignore[arg-type]
    assert err.value.status is StepStatus.UNAVAILABLE
    assert "bash scripts/chimerax.sh" in err.value.detail and missing in err.value.detail
    assert ctx.guest.ran == [f"command -v {missing}"]
    bare = _Ctx({})
    with pytest.raises(StepError) as err:
        adapter.step_launch(bare, step)  # type: ignore[arg-type]
    assert err.value.status is StepStatus.UNAVAILABLE and "PATH" in err.value.detail


def test_the_program_is_mapped_as_a_whole_word_and_the_rest_port_found() -> None:
    ctx = _Ctx({"chimerax": "/opt/cx/bin/chimerax"})
    argv = adapter.launch_argv(ctx, LAUNCH)  # type: ignore[arg-type]
    assert argv == ["/opt/cx/bin/chimerax", "--cmd",
                    "remotecontrol rest start json true port 8123"]
    assert adapter.rest_port(argv) == 8123
    assert adapter.launch_argv(ctx, "chimerax-like --x")[0] == "chimerax-like"  # type: ignore[arg-type]
    assert adapter.launch_argv(ctx, "chimerax --nogui")[0] == "/opt/cx/bin/chimerax"  # type: ignore[arg-type]
    assert adapter.rest_port(["chimerax", "--nogui"]) is None
    assert 60 <= adapter.ready_timeout(ctx) <= adapter.MAX_READY_TIMEOUT_S  # type: ignore[arg-type]


def test_a_key_into_the_view_is_resolved_to_this_build_s_path_and_nothing_else() -> None:
    view = "._draw_shape.bindings._opengl_context.window.view."
    model = "_state_containers.models._models.(1,)"
    theirs = f"{model}._atoms_drawing{view}_background_rgba"
    ours = f"{model}._child_drawings.#0{view}_background_rgba"
    states = {ours: "[0.5 0.5 0.5 0.]", f"{model}._name": "1dns",
              f"_state_containers.models._models.(2,)._child_drawings.#0{view}_x": 1}
    assert adapter.equivalent_key(states, theirs) == ours
    assert adapter.equivalent_key(states, f"{model}._name") == f"{model}._name"
    assert adapter.equivalent_key(states, f"{model}._other") is None
    assert adapter.equivalent_key(states, f"{model}._atoms_drawing{view}_x") is None  # model 2's
    assert adapter.equivalent_key(states, f"{model}._atoms_drawing{view}_missing") is None


def test_objects_1_12_reaches_by_another_path_are_found_at_scienceboard_s_keys() -> None:
    model = "_state_containers.models._models.(1,)"
    group = f"{model}._child_drawings.#3"
    overlay = f"{model}._child_drawings.#0._draw_shape.bindings._opengl_context.window.view" \
              "._overlays.#0"
    states = {f"{group}._name": "hydrogen bonds", f"{group}._child_drawings.#0.name": "pbonds",
              f"{group}._child_drawings.#0._opaque_color_count": 12,
              f"{model}._child_drawings.#2.name": "bonds", f"{model}._bonds_drawing": None,
              f"{overlay}._name": "Color key", f"{overlay}._id.#0": 2, f"{overlay}._border": False,
              f"{overlay}._child_drawings.#0._name": "",
              f"{overlay}._child_drawings.#0.label.name": "scalebar"}
    assert adapter.equivalent_key(states, f"{group}._pbond_drawing._opaque_color_count") \
        == f"{group}._child_drawings.#0._opaque_color_count"
    assert adapter.equivalent_key(states, f"{group}._pbond_drawing._colors") is None
    # an attribute the dump holds (None: no drawing) is never replaced by a child's
    assert adapter.equivalent_key(states, f"{model}._bonds_drawing._colors") is None
    key = "_state_containers.models._models.(2,)"
    assert adapter.equivalent_key(states, f"{key}._border") == f"{overlay}._border"
    assert adapter.equivalent_key(states, "_state_containers.models._models.(3,)._border") is None
    label = f"{overlay}._child_drawings.#0.label"
    assert adapter.equivalent_key(states, f"{label}.drawing._name") == f"{label}.name"
    # a label the dump holds without its model is not taken for one
    assert adapter.equivalent_key({"x.label.name": "scalebar"}, "x.label.drawing._name") is None
    known = adapter.aliases(states)
    findable = adapter.findable_states(states, known)
    assert findable[f"{key}._name"] == "Color key" and findable[f"{label}.drawing._name"] \
        == "scalebar"
    # a model list that holds the id already keeps its own entries
    states["_state_containers.models._models.(2,)._name"] = "other"
    assert adapter.equivalent_key(states, f"{key}._border") is None
