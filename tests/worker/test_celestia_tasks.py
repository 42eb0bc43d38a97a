"""ScienceBoard's Celestia tasks on the project's build of ScienceBoard's Celestia fork
(``scripts/celestia.sh``) in a local slot, set up from their task files and judged by their
own checkers over Celestia's state dump (read through the guest agent). For each task a
scripted wrong solution fails, then a right one (done on top of it, in the same Celestia)
succeeds. Solutions are Celestia's keyboard commands, context menus and its Preferences dialog
worked through the guest agent as a user would (see celestia_helpers), each done when the
dump shows its effect."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from coda.procs import free_port
from worker.providers.local import LocalDesktop

from .celestia_helpers import CASES, require_build, setup_task, wrong_then_right


@pytest.fixture(scope="module", autouse=True)
def _built(desktop_host: None) -> None:
    require_build()


@pytest.mark.parametrize("name", sorted(CASES))
def test_celestia_task_wrong_then_right_on_the_real_celestia(desktop: LocalDesktop,
                                                             name: str) -> None:
    wrong_then_right(desktop, name)


def test_the_dump_is_only_on_loopback_and_its_route_answers_clear_errors(
        desktop: LocalDesktop) -> None:
    """The dump server binds 127.0.0.1 only; the agent's route refuses bad bodies with 422,
    names an entity Celestia does not know (502) and a port nothing serves (503)."""
    ctx = setup_task(desktop, "B-02")
    port = ctx.layout.portlike
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                               text=True, check=True).stdout.split()
    assert f"127.0.0.1:{port}" in listening and f"0.0.0.0:{port}" not in listening
    assert desktop.guest is not None
    with httpx.Client(base_url=desktop.guest.base_url, timeout=60,
                      headers={"Authorization": f"Bearer {desktop.token}"}) as http:
        for bad in ({"port": 80}, {"port": port, "query": [{"name": "Sol", "type": 7}]},
                    {"port": port, "query": [{"name": "", "type": 1}]},
                    {"port": port, "op": "quit"}, {"port": port, "extra": 1}):
            assert http.post("/coda/celestia", json=bad).status_code == 422, bad
        unknown = http.post("/coda/celestia", json={
            "port": port, "query": [{"name": "Vulcan", "type": 2}]})
        assert unknown.status_code == 502 and "Celestia answered 400" in unknown.text
        assert http.post("/coda/celestia", json={"port": free_port()}).status_code == 503
        ok = http.post("/coda/celestia", json={"port": port, "query": [
            {"name": "Sol", "type": 1}, {"name": "Neptune", "type": 2},
            {"name": "Andromeda Galaxy", "type": 3}]})
        assert ok.status_code == 200, ok.text
        entities = ok.json()["result"]["entity"]
        assert {"Sol", "Neptune", "Andromeda Galaxy", "observer"} <= set(entities)
        assert entities["Neptune"]["radius"] > 20_000
