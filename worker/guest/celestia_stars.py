"""Which star names the Celestia serving a dump port resolves, read from its own catalogues.

ScienceBoard's fork answers a dump query for a star (selection type 1) it cannot find by
converting a JSON ``null`` to a string, which its release build (``-fno-exceptions``) turns into
``abort()``: the whole application dies (issue 38, point 7). Bodies and deep-sky objects it does
not know answer 400. So the route (:mod:`.routes_celestia`) relays a star query only for a name
this module vouches for, and refuses the rest before Celestia sees them.

A name is vouched for when Celestia's own lookup (``StarNameDatabase::findCatalogNumberByName``)
is sure to find a star: a name its catalogues give (``starnames.dat``, the ``.stc`` catalogues
and extras), compared without ASCII case as Celestia does, whose star exists, or a catalogue
number of a star that exists (``#n``, ``HIP n``, ``TYC a-b-c``, ``HD n`` and ``SAO n`` through
the cross indexes). Names whose first word is a Greek letter (Celestia stores them rewritten)
are not vouched for. The catalogues are those of the process listening on the port (Celestia
runs in its data directory: ``/proc/PID/cwd``), read once per directory.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

GREEK_FIRST = re.compile(r"(?i)(ALF|BET|GAM|DEL|EPS|ZET|ETA|TET|THE|IOT|KAP|LAM|MU|NU|XI|OMI|PI|"
                         r"RHO|SIG|TAU|UPS|PHI|CHI|PSI|OME|ALPHA|BETA|GAMMA|DELTA|EPSILON|ZETA|"
                         r"THETA|IOTA|KAPPA|LAMBDA|OMICRON|SIGMA|UPSILON|OMEGA)\d*(\s|$)")
CATALOGUE_NUMBER = re.compile(r"(?i)(#|HIP|HD|SAO)\s*(\d{1,10})[ \t]*")
TYCHO = re.compile(r"(?i)TYC\s*(\d{1,5})-(\d{1,5})-(\d{1,2})[ \t]*")
STC_TOKEN = re.compile(r'#[^\n]*|"(?:[^"\\]|\\.)*"|[{}]|[^\s{}"#]+')
TYC3_MULTIPLIER, TYC2_MULTIPLIER = 1_000_000_000, 10**4  # Celestia's StarNameDatabase
ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    return name.translate(ASCII_LOWER)


@dataclass
class Catalogue:
    numbers: set[int] = field(default_factory=set)
    names: dict[str, int | None] = field(default_factory=dict)  # folded name -> its number
    cross: dict[str, dict[int, int]] = field(default_factory=dict)  # "HD"/"SAO" -> numbers

    def _exists(self, number: int | None) -> bool:
        return number is not None and number in self.numbers

    def knows(self, name: str) -> bool:
        """Whether Celestia's lookup of ``name`` is sure to find a star."""
        if not name or GREEK_FIRST.match(name):
            return False
        if (key := fold(name)) in self.names and name.isascii():
            number = self.names[key]
            return number is None or self._exists(number)
        if found := CATALOGUE_NUMBER.fullmatch(name):
            prefix, number = found.group(1).upper(), int(found.group(2))
            if prefix in self.cross:
                return self._exists(self.cross[prefix].get(number))
            return self._exists(number)
        if found := TYCHO.fullmatch(name):
            t1, t2, t3 = (int(g) for g in found.groups())
            return self._exists(t3 * TYC3_MULTIPLIER + t2 * TYC2_MULTIPLIER + t1)
        return False


def _config_values(config: str, key: str) -> list[str]:
    """The quoted values of ``key`` in ``celestia.cfg`` (one string or a ``[...]`` list)."""
    text = "\n".join(line.split("#", 1)[0] for line in config.splitlines())
    found = re.search(rf"\b{key}\s+(\"[^\"]*\"|\[[^\]]*\])", text)
    return re.findall(r'"([^"]*)"', found.group(1)) if found else []


def _read_stars_dat(path: Path, into: Catalogue) -> None:
    data = path.read_bytes()
    if data[:8] != b"CELSTARS" or len(data) < 14:
        return
    (count,) = struct.unpack_from("<I", data, 10)
    into.numbers.update(n for (n,) in struct.iter_unpack("<I16x", data[14:14 + 20 * count]))


def _read_cross_index(path: Path) -> dict[int, int]:
    data = path.read_bytes()
    if data[:8] != b"CELINDEX":
        return {}
    body = data[10:len(data) - (len(data) - 10) % 8]
    return dict(struct.iter_unpack("<II", body))


def _read_stc(path: Path, into: Catalogue) -> None:
    """Each definition's header at depth 0: ``[Add|Modify|Replace] [Star|Barycenter]
    [number] ["name:name"] { ... }``."""
    depth, number, names = 0, None, list[str]()
    for token in STC_TOKEN.findall(path.read_text(errors="replace")):
        if token.startswith("#"):
            continue
        if token == "{":
            if depth == 0:
                if number is not None:
                    into.numbers.add(number)
                for name in names:
                    into.names.setdefault(fold(name), number)
            depth += 1
        elif token == "}":
            depth = max(depth - 1, 0)
            if depth == 0:
                number, names = None, []
        elif depth == 0 and token.isdigit():
            number = int(token)
        elif depth == 0 and token.startswith('"'):
            names = [n for n in token[1:-1].split(":") if n]


def _read_names(path: Path, into: Catalogue) -> None:
    for line in path.read_text(errors="replace").splitlines():
        number, sep, rest = line.partition(":")
        if sep and number.strip().isdigit():
            for name in rest.split(":"):
                if name:
                    into.names.setdefault(fold(name), int(number))


@lru_cache(maxsize=8)
def load(root: Path, stamp: float) -> Catalogue:
    """The star catalogues Celestia in data directory ``root`` loads (``stamp``: the
    configuration's modification time, so an edited one is read again)."""
    del stamp
    config = (root / "celestia.cfg").read_text(errors="replace")
    cat = Catalogue()
    for value in _config_values(config, "StarDatabase"):
        _read_stars_dat(root / value, cat)
    stc = [root / v for v in _config_values(config, "StarCatalogs")]
    for extras in _config_values(config, "ExtrasDirectories"):
        if (root / extras).is_dir():
            stc += sorted((root / extras).rglob("*.stc"))
    for path in stc:
        if path.is_file():
            _read_stc(path, cat)
    for value in _config_values(config, "StarNameDatabase"):
        _read_names(root / value, cat)
    for key, prefix in (("HDCrossIndex", "HD"), ("SAOCrossIndex", "SAO")):
        for value in _config_values(config, key):
            if (root / value).is_file():
                cat.cross[prefix] = _read_cross_index(root / value)
    return cat


def listening_inode(port: int, proc: Path = Path("/proc")) -> str | None:
    """The socket inode listening on 127.0.0.1:``port`` (``/proc/net/tcp``)."""
    want = f"0100007F:{port:04X}"
    try:
        lines = (proc / "net" / "tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 9 and fields[1] == want and fields[3] == "0A":
            return fields[9]
    return None


def serving_dir(port: int, proc: Path = Path("/proc")) -> Path | None:
    """The working directory of the process listening on 127.0.0.1:``port`` (None when none
    is found or its directory has no ``celestia.cfg``)."""
    inode = listening_inode(port, proc)
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in (p for p in os.listdir(proc) if p.isdigit()):
        try:
            fds = os.listdir(proc / pid / "fd")
            if any(os.readlink(proc / pid / "fd" / fd) == target for fd in fds):
                cwd = Path(os.readlink(proc / pid / "cwd"))
                return cwd if (cwd / "celestia.cfg").is_file() else None
        except OSError:
            continue
    return None


def catalogue_for(port: int) -> Catalogue | None:
    """The catalogues of the Celestia serving ``port``; None when they cannot be found."""
    root = serving_dir(port)
    if root is None:
        return None
    try:
        return load(root, (root / "celestia.cfg").stat().st_mtime)
    except OSError:
        return None
