#!/usr/bin/python3
"""Stand-ins for the GRASS GIS data sets ScienceBoard's tasks use, built from what Debian's
GRASS packages ship (no download): ``/usr/bin/python3 grassdata.py [DEST]`` writes ``DEST/`` (a
GRASS database; default :func:`default_dest`, where local slots copy it from; the desktop
image builds it into its home template) with

* ``world_latlong_wgs84``: GRASS's demolocation (``grass-core``: Natural Earth 1:110m country
  boundaries), the start location of every task (GRASS itself creates it so for a new user);
* ``natural_earth_dataset`` (ScienceBoard's is a 207 MB download): vector ``countries`` (the
  demolocation's countries, same columns, plus the two points task D-04 presupposes: one in the
  Mediterranean Sea and cat 257 at the coordinates its checker names) and raster
  ``natural_earth`` (the countries rasterised);
* ``grassdata_piemonte_utm32n_wgs84_grass7`` (GRASS's Piemonte sample location, 291 MB, in no
  package), EPSG:32632: synthetic maps inside Piemonte's extent under the names and columns the
  tasks use: ``boundary_region`` (Piemonte's eight provinces as areas, columns ``NOME``,
  ``ISTAT``, ``SIGLA``), ``roadsmajor`` and ``railroads`` (lines), ``firestations``,
  ``hospitals``, ``schools`` (column ``wheelchair``), ``points_of_interest`` (one POI,
  "Guglielmo Pepe", whose start date has a month and a day, as task D-03 presupposes), rasters
  ``lakes`` and ``elevation``: more vector maps than raster maps (task A-09).

What depends on the real data sets is not reproduced (their answers and counts: tasks C-01 to
C-07, B-12's cell count); :data:`FACTS` lists the answers this stand-in does hold, and the
coverage report says which tasks are left out and why.

Run with ``--session KIND`` it is the part that runs inside a GRASS session (``grass ...
--exec``). The build is deterministic (seeded) and writes ``DEST/.coda-standin`` (the hash of
this file) last: :func:`is_built` checks it.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WORLD = "world_latlong_wgs84"
NATURAL_EARTH = "natural_earth_dataset"
PIEMONTE = "grassdata_piemonte_utm32n_wgs84_grass7"
STAMP = ".coda-standin"

# (a phrase of the task's instruction, the answer): the answer tasks the stand-in is built for
FACTS = (
    ("Which type of maps is more than the other in grassdata_piemonte", "vector"),
    ("How many provinces are there in Piemonte", "8"),
)

# Piemonte's provinces: name, ISTAT code, abbreviation (the real ones; the shapes are not)
PROVINCES = (("TORINO", 1, "TO"), ("VERCELLI", 2, "VC"), ("NOVARA", 3, "NO"),
             ("CUNEO", 4, "CN"), ("ASTI", 5, "AT"), ("ALESSANDRIA", 6, "AL"),
             ("BIELLA", 96, "BI"), ("VERBANO-CUSIO-OSSOLA", 103, "VB"))
PIEMONTE_BOX = {"w": 313000, "e": 517000, "s": 4879000, "n": 5145000}  # UTM 32N, metres
D04_KEPT = (257, "-79.1050308691105", "8.348947891274")  # the point D-04's checker keeps
D04_PLANTED = (258, "17.5", "35.0")  # the point in the Mediterranean Sea it wants deleted


def default_dest() -> Path:
    """Where the local desktop set-up builds the data sets and local slots find them:
    ``$CODA_GRASSDATA``, else ``$XDG_CACHE_HOME/coda/grassdata`` (``~/.cache/coda/grassdata``)."""
    if os.environ.get("CODA_GRASSDATA"):
        return Path(os.environ["CODA_GRASSDATA"])
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "coda" / "grassdata"


def source_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def is_built(dest: Path) -> bool:
    stamp = dest / STAMP
    return stamp.is_file() and stamp.read_text().strip() == source_hash()


def grass_home() -> Path:
    out = subprocess.run(["grass", "--config", "path"], capture_output=True, text=True,
                         check=True, timeout=120)
    return Path(out.stdout.strip())


def grass(args: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(["grass", *args], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"grass {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stderr[-3000:]}")


def build(dest: Path) -> Path:
    """Build the stand-in database at ``dest`` (replaced when it exists)."""
    dest = dest.resolve()
    work = Path(tempfile.mkdtemp(prefix=".standin-", dir=dest.parent))
    env = {**os.environ, "GRASS_SKIP_MAPSET_OWNER_CHECK": "1"}
    env.pop("GISRC", None)
    try:
        demo = grass_home() / "demolocation"
        shutil.copytree(demo, work / WORLD)
        shutil.copytree(demo, work / NATURAL_EARTH)
        me = sys.executable, str(Path(__file__).resolve())
        grass([str(work / NATURAL_EARTH / "PERMANENT"), "--exec", *me, "--session",
               NATURAL_EARTH], env)
        grass(["-c", "EPSG:32632", "-e", str(work / PIEMONTE)], env)
        grass([str(work / PIEMONTE / "PERMANENT"), "--exec", *me, "--session", PIEMONTE], env)
        for lock in work.glob("*/*/.gislock"):
            lock.unlink()
        (work / STAMP).write_text(source_hash() + "\n")
        work.chmod(0o755)
        if dest.exists():
            shutil.rmtree(dest)
        work.rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


# ------------------------------------------------------------------------- inside a session


def ascii_points(rows: list[tuple[float, float, list[str]]]) -> str:
    return "".join(f"{x}|{y}|{'|'.join(cols)}\n" for x, y, cols in rows)


def natural_earth(gs: object) -> None:
    run = gs.run_command  # type: ignore[attr-defined]
    write = gs.write_command  # type: ignore[attr-defined]
    run("g.rename", vector="country_boundaries,countries", quiet=True)
    points = "".join(f"P 1 1\n {x} {y}\n 1 {cat}\n" for cat, x, y in (D04_KEPT, D04_PLANTED))
    write("v.edit", map="countries", tool="add", input="-", flags="n", stdin=points, quiet=True)
    run("g.region", vector="countries", res=0.5, flags="a", quiet=True)
    run("v.to.rast", input="countries", output="natural_earth", use="cat", quiet=True)
    run("g.region", n=90, s=-90, w=-180, e=180, res=0.5, quiet=True)


def _lines(rng: random.Random, count: int, box: dict[str, int]) -> str:
    out: list[str] = []
    for _ in range(count):
        n = rng.randint(3, 6)
        pts = [(rng.uniform(box["w"], box["e"]), rng.uniform(box["s"], box["n"]))
               for _ in range(n)]
        out.append(f"L {n} 1\n" + "".join(f" {x:.1f} {y:.1f}\n" for x, y in pts)
                   + f" 1 {len(out) + 1}\n")
    return "".join(out)


def _points(gs: object, name: str, columns: str, rows: list[tuple[float, float, list[str]]]
            ) -> None:
    gs.write_command("v.in.ascii", input="-", output=name, separator="pipe",  # type: ignore[attr-defined]
                     columns=f"x double precision, y double precision, {columns}", x=1, y=2,
                     stdin=ascii_points(rows), quiet=True)


def piemonte(gs: object) -> None:
    run = gs.run_command  # type: ignore[attr-defined]
    write = gs.write_command  # type: ignore[attr-defined]
    rng = random.Random(20250324)
    box = PIEMONTE_BOX
    run("g.region", res=500, flags="a", quiet=True, **box)
    run("v.mkgrid", map="boundary_region", grid="4,2", quiet=True)
    run("v.db.addcolumn", map="boundary_region",
        columns="NOME varchar(40), ISTAT integer, SIGLA varchar(2)", quiet=True)
    for cat, (name, istat, sigla) in enumerate(PROVINCES, start=1):
        for column, value in (("NOME", name), ("ISTAT", istat), ("SIGLA", sigla)):
            run("v.db.update", map="boundary_region", column=column, value=value,
                where=f"cat = {cat}", quiet=True)
    for name, count in (("roadsmajor", 25), ("railroads", 12)):
        write("v.in.ascii", input="-", output=name, format="standard", flags="n",
              stdin=_lines(rng, count, box), quiet=True)
        run("v.db.addtable", map=name, columns="name varchar(40)", quiet=True)

    def spot() -> tuple[float, float]:
        return (round(rng.uniform(box["w"], box["e"]), 1),
                round(rng.uniform(box["s"], box["n"]), 1))

    _points(gs, "firestations", "name varchar(60)",
            [(*spot(), [f"Vigili del Fuoco {i}"]) for i in range(1, 16)])
    _points(gs, "hospitals", "name varchar(60), PROVINCIA varchar(40)",
            [(*spot(), [f"Ospedale {i}", PROVINCES[i % 8][0]]) for i in range(1, 31)])
    _points(gs, "schools", "name varchar(60), wheelchair varchar(10)",
            [(*spot(), [f"Scuola {i}", ("yes", "no", "limited", "")[i % 4]])
             for i in range(1, 41)])
    pois = [(*spot(), [f"Punto {i}", str(1800 + 7 * i) if i % 3 else ""])
            for i in range(1, 60)]
    pois.append((*spot(), ["Guglielmo Pepe", "1858-03-12"]))
    _points(gs, "points_of_interest", "name varchar(60), start_date varchar(20)", pois)
    run("r.mapcalc", expression="elevation = 200 + (y() - 4879000) / 100.0 + "
                                "500 * sin(x() / 5000.0)", quiet=True)
    run("r.mapcalc", expression="lakes = if(elevation < 260 && sin(y() / 3000.0) > 0.6, 1, "
                                "null())", quiet=True)


def session(kind: str) -> None:
    import grass.script as gs

    {NATURAL_EARTH: natural_earth, PIEMONTE: piemonte}[kind](gs)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--session":
        session(argv[2])
        return 0
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        sys.stderr.write(f"usage: {argv[0]} [DEST]  (a GRASS database of stand-in data sets)\n")
        return 2
    dest = Path(argv[1]) if len(argv) == 2 else default_dest()
    if is_built(dest):
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    build(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
