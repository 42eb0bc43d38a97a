"""A dump query naming a star Celestia does not know (issue 38, point 7): the fork's release
build aborts on it, so the guest agent's route refuses it (400 naming the field) from
Celestia's own catalogues (worker/guest/celestia_stars.py), and Celestia keeps answering.
Unit tests on a small catalogue built as files, then the real Celestia."""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
import pytest

from worker.guest import celestia_stars
from worker.providers.local import LocalDesktop

from .celestia_helpers import require_build, setup_task

CONFIG = """# a comment naming StarDatabase "data/none.dat"
Configuration
{
  StarDatabase      "data/stars.dat"   # the binary catalogue
  StarNameDatabase  "data/starnames.dat"
  StarCatalogs      [ "data/near.stc"
                      "data/missing.stc" ]
  HDCrossIndex      "data/hd.dat"
  ExtrasDirectories [ "extras" ]
}
"""
NEAR_STC = """# Sirius
Barycenter 32349 "Sirius:ALF CMa"
{ RA 101.28 Dec -16.7 Distance 8.6 }
"Sirius A:ALF CMa A"
{ OrbitBarycenter "Sirius" InfoURL "https://example.org/#{x}" }
Modify 70890 "Proxima Centauri" { AbsMag 15.5 }
"""


@pytest.fixture
def catalogue(tmp_path: Path) -> celestia_stars.Catalogue:
    data = tmp_path / "data"
    (tmp_path / "extras" / "addon").mkdir(parents=True)
    data.mkdir()
    (tmp_path / "celestia.cfg").write_text(CONFIG)
    numbers = [0, 32349, 1 * 1_000_000_000 + 2082 * 10_000 + 2143]
    (data / "stars.dat").write_bytes(b"CELSTARS" + struct.pack("<HI", 0x100, len(numbers))
                                     + b"".join(struct.pack("<I16x", n) for n in numbers))
    (data / "starnames.dat").write_text("0:Sol\n32349:Sirius:Dog Star\n99999:Ghost\nbad line\n")
    (data / "near.stc").write_text(NEAR_STC)
    (data / "hd.dat").write_bytes(b"CELINDEX" + struct.pack("<H", 0x100)
                                  + struct.pack("<IIII", 48915, 32349, 1, 424242))
    (tmp_path / "extras" / "addon" / "mine.stc").write_text('Star "Coda Star" { AbsMag 1 }')
    return celestia_stars.load(tmp_path, 0.0)


@pytest.mark.parametrize(("name", "known"), [
    ("Sol", True), ("sol", True), ("Dog Star", True), ("Sirius", True), ("Sirius A", True),
    ("Proxima Centauri", True), ("Coda Star", True), ("HIP 32349", True), ("hip32349", True),
    ("#0", True), ("HD 48915", True), ("TYC 2143-2082-1", True),
    ("Ghost", False), ("HIP 99999", False), ("HIP 999999999999", False), ("HD 1", False),
    ("SAO 1", False), ("TYC 1-1-1", False), ("ALF CMa", False), ("Alpha CMa", False),
    ("Nosuchstar", False), (" Sol", False), ("Sol ", False), ("HIP 32349 x", False),
    ("", False), ("OrbitBarycenter", False), ("RA", False), ("https", False),
])
def test_the_catalogue_vouches_only_for_stars_celestia_finds(
        catalogue: celestia_stars.Catalogue, name: str, known: bool) -> None:
    assert catalogue.knows(name) is known


def test_no_celestia_on_the_port_means_no_catalogue(tmp_path: Path) -> None:
    assert celestia_stars.serving_dir(1, tmp_path) is None
    assert celestia_stars.catalogue_for(1) is None


def _post(http: httpx.Client, port: int, name: str, kind: int = 1) -> httpx.Response:
    return http.post("/coda/celestia", json={"port": port, "query": [
        {"name": "Sol", "type": 1}, {"name": name, "type": kind}]})


def test_an_unknown_star_is_refused_and_celestia_keeps_answering(
        desktop_host: None, desktop: LocalDesktop) -> None:
    require_build()
    ctx = setup_task(desktop, "B-02")
    port = ctx.layout.portlike
    assert desktop.guest is not None
    with httpx.Client(base_url=desktop.guest.base_url, timeout=60,
                      headers={"Authorization": f"Bearer {desktop.token}"}) as http:
        for name in ("Nosuchstar", "HIP 999999999", "Vulcan", "TYC 1-1-1", "Alpha CMa"):
            refused = _post(http, port, name)
            assert refused.status_code == 400, refused.text
            assert "query[1].name" in refused.text and name in refused.text
            alive = _post(http, port, "Sirius A")
            assert alive.status_code == 200, alive.text
            assert alive.json()["result"]["entity"]["Sirius A"]["distance"] > 1e13
        for name in ("HIP 32349", "HD 48915", "Proxima Centauri"):
            assert _post(http, port, name).status_code == 200, name
        # a body it does not know: Celestia answers 400 itself (the route: 502)
        assert _post(http, port, "Vulcan", 2).status_code == 502
        assert http.post("/coda/celestia", json={"port": port, "op": "version"}
                         ).status_code == 200
        # the guard is what keeps it alive: the fork still dies on such a star
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"http://127.0.0.1:{port}/dump", content=b'[{"name": "Nosuchstar", '
                       b'"type": 1}]', timeout=20)
        gone = http.post("/coda/celestia", json={"port": port, "op": "version"})
        assert gone.status_code == 503
