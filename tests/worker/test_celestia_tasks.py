"""ScienceBoard's Celestia tasks on the project's build of ScienceBoard's Celestia fork
(``scripts/celestia.sh``) in a local slot, set up from their task files and judged by their
own checkers over Celestia's state dump (read through the guest agent). For each task a
scripted wrong solution fails, then a right one (done on top of it, in the same Celestia)
succeeds. Solutions are Celestia's keyboard commands sent through the guest agent as a user
types them (see celestia_helpers), each done when the dump shows its effect."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from coda.actions import Hotkey, Press, TypeText
from coda.contracts.desktop import CheckStatus, CheckVerdict
from coda.procs import free_port
from worker.providers.local import LocalDesktop
from worker.tasks import run_checkers

from .celestia_helpers import (
    STAR,
    Solution,
    answer,
    centre,
    go_to,
    keys,
    keys_until,
    reference_mark,
    require_build,
    setup_task,
    then,
)


@pytest.fixture(scope="module", autouse=True)
def _built(desktop_host: None) -> None:
    require_build()


def render(flag: str) -> object:
    return lambda d: d["config"]["render"][flag]


# task: (checker families, wrong solution, right solution)
CASES: dict[str, tuple[list[str], Solution, Solution]] = {
    # time scale 0.05 (time); wrong: 10x slower only
    "A-02": (["info"], keys(TypeText(text="k"), done=lambda d: abs(d["time"]["scale"] - 0.1)
                            < 1e-9, what="time 10x slower"),
             keys(TypeText(text="K"), done=lambda d: abs(d["time"]["scale"] - 0.05) < 1e-9,
                  what="time 20x slower")),
    # constellation figures and boundaries (render flags); wrong: the figures only
    "A-04": (["info"], keys(TypeText(text="/"), done=render("diagrams"), what="figures"),
             keys(Hotkey(keys=["ctrl", "b"]), done=render("boundaries"), what="boundaries")),
    # star style "scaled discs" (2); wrong: "fuzzy points" (1)
    "A-07": (["info"], keys_until("", lambda d: d["config"]["starStyle"] == 1, "fuzzy points",
                                  hotkey=["ctrl", "s"]),
             keys_until("", lambda d: d["config"]["starStyle"] == 2, "scaled discs",
                        hotkey=["ctrl", "s"])),
    # texture resolution high (2); wrong: low (0)
    "A-08": (["info"], keys_until("r", lambda d: d["config"]["resolution"] == 0, "low res"),
             keys_until("R", lambda d: d["config"]["resolution"] == 2, "high res")),
    # go to Neptune (entity distance); wrong: Uranus
    "B-02": (["info"], go_to("Uranus"), go_to("Neptune")),
    # near Callisto, Jupiter in view (distance, visibility); wrong: near Ganymede
    "B-08": (["info"], then(go_to("Ganymede"), centre("Jupiter")),
             then(go_to("Callisto"), centre("Jupiter"))),
    # near Pluto, Sol in view, time stopped (distance, visibility, time); wrong: time runs
    "B-09": (["info"], then(go_to("Pluto"), centre("Sol", STAR, zoom=True)),
             keys(Press(key="space"), done=lambda d: d["time"]["pause"], what="time paused")),
    # near Orcus, its velocity vector and planetographic grid (marks); wrong: the grid only
    "B-04": (["info"], then(go_to("Orcus"), reference_mark("Orcus", "g", "planetographicGrid")),
             reference_mark("Orcus", "v", "velocityVector")),
    # near Dysnomia, its frame axes and sun direction (marks); wrong: the frame axes only
    "B-05": (["info"], then(go_to("Dysnomia"), reference_mark("Dysnomia", "f", "frameAxes")),
             reference_mark("Dysnomia", "s", "sunDirection")),
    # go to Iapetus (distance); wrong: Titan
    "D-01": (["info"], go_to("Titan"), go_to("Iapetus")),
    # Uranus's moons without the minor ones (answer)
    "C-01": (["stop"], answer("27"), answer("5")),
    # NGC 185's Hubble type (answer)
    "C-07": (["stop"], answer("E5"), answer("E3")),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_celestia_task_wrong_then_right_on_the_real_celestia(desktop: LocalDesktop,
                                                             name: str) -> None:
    families, wrong, right = CASES[name]
    ctx = setup_task(desktop, name)
    outcome = run_checkers(ctx, wrong(desktop, ctx))
    assert outcome.verdict is CheckVerdict.FAILURE, outcome
    assert any(r.status is CheckStatus.FAIL for r in outcome.results)
    outcome = run_checkers(ctx, right(desktop, ctx))
    assert outcome.verdict is CheckVerdict.SUCCESS, outcome
    assert sorted({r.type for r in outcome.results}) == sorted(set(families))


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
