"""The typed edges from the worker's guest client to the agent's app routes, on a real agent
without a display: ``GuestClient.grass`` sends a :class:`GrassRequest` to ``/coda/grass``,
which forwards it to the real GRASS GUI state reader
(:mod:`worker.tasks.adapters.grass.wxgui_state`) serving on its socket in the agent's home, and
reads back a :class:`GrassReply`; ScienceBoard's ``/append``, ``/opt`` and ``/chimerax/run``
through their typed methods. The reader answers exactly the operations the contract names, and
the client has no untyped call left."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from coda.contracts.desktop import DesktopBroken, GrassOp, GrassRequest, GuestKind
from coda.procs import free_port, stop_process
from coda.tasks import parse_task
from tests.fixtures.waiting import exited, wait_for
from worker.providers.base import GuestLayout
from worker.providers.client import GuestClient, GuestError
from worker.tasks import TaskContext
from worker.tasks.adapters.grass import gui, wxgui_state


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GuestClient, Path]]:
    """A real agent (no display needed for this route) whose home is a fresh directory."""
    home = tmp_path_factory.mktemp("home")
    port, token = free_port(), secrets.token_urlsafe(24)
    proc = subprocess.Popen([sys.executable, "-m", "worker.guest", "serve", "--host",
                             "127.0.0.1", "--port", str(port)],
                            env={**os.environ, "HOME": str(home), "CODA_GUEST_TOKEN": token},
                            stdin=subprocess.DEVNULL)
    guest = GuestClient(f"http://127.0.0.1:{port}", token=token, kind=GuestKind.CODA)
    try:
        wait_for(lambda: _answers(guest), "the agent", gone=exited(proc, "the agent"))
        yield guest, home
    finally:
        guest.close()
        stop_process(proc, timeout=10)


def _answers(guest: GuestClient) -> bool:
    try:
        guest.request("GET", "/health", timeout=2)
    except DesktopBroken:
        return False
    return True


def _ctx(guest: GuestClient) -> TaskContext:
    task = parse_task({"id": "grass-edge", "instruction": "x", "config": []})
    return TaskContext(task=task, guest=guest, layout=GuestLayout())


def test_the_reader_answers_exactly_the_operations_the_contract_names() -> None:
    assert {op.value for op in GrassOp} == (set(wxgui_state.MAIN_THREAD_OPS)
                                            | set(wxgui_state.THREAD_OPS))


def test_the_guest_client_has_no_untyped_call() -> None:
    assert not hasattr(GuestClient, "post_json")
    untyped = [name for name, fn in vars(GuestClient).items()
               if callable(fn) and get_type_hints(fn).get("return") is Any]
    assert untyped == []


def test_a_request_goes_through_the_route_to_the_reader_and_back_typed(
        agent: tuple[GuestClient, Path]) -> None:
    guest, home = agent
    with pytest.raises(GuestError) as none_yet:
        guest.grass(GrassRequest(op=GrassOp.READY, timeout_s=2))
    assert none_yet.value.status == 503 and "no GRASS GIS GUI" in none_yet.value.detail
    with pytest.raises(gui.Unreadable):
        gui.call(_ctx(guest), GrassOp.READY, timeout_s=2)
    server = wxgui_state.serve(str(home / ".coda" / "grass-gui.sock"))
    try:
        # no GRASS here: the reader runs the module and answers its failure, typed
        reply = guest.grass(GrassRequest(op=GrassOp.GCMD, args={"cmd": "g.version"},
                                         timeout_s=5))
        assert reply.ok is False and reply.error and reply.result is None
        with pytest.raises(gui.GuiError, match="could not gcmd"):
            gui.call(_ctx(guest), GrassOp.GCMD, cmd="g.version", timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()


def test_scienceboards_routes_through_their_typed_methods(agent: tuple[GuestClient, Path]) -> None:
    guest, home = agent
    target = home / "sci" / "Basic.lean"
    guest.append(str(target), "import Mathlib\n")
    guest.append(str(target), "theorem t : True := by sorry\n")
    assert target.read_text() == "import Mathlib\ntheorem t : True := by sorry\n"
    guest.set_a11y_depth(10)
    with pytest.raises(GuestError) as no_chimerax:  # nothing serves ChimeraX's port here
        guest.chimerax(free_port(), "version")
    assert no_chimerax.value.status == 502 and "ChimeraX remote control" in no_chimerax.value.detail
