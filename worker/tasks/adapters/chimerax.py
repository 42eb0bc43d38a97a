"""ChimeraX (ScienceBoard ``sci/ChimeraX``): commands go to ChimeraX's REST remote control
(``remotecontrol rest start json true port «PORTLIKE»``) through the guest's ``/chimerax/run``;
a reply is ``{"error": null | ..., "log messages": {"note": [...]}}``. Steps ``open``, ``turn``,
``clear_log``, ``color``, ``alphafold_match``, ``destroy``; checkers ``states`` (a session-state
dump written by the ``states`` command of ScienceBoard's chimerax-states bundle), ``info`` (the
lines ``info <key>`` logs) and ``file`` (a guest file contains a value).

ChimeraX never reaches the network: ``launch`` first places ScienceBoard's pre-placed files
(``examples/scienceboard/chimerax-data``: eight PDB entries, an AlphaFold model, its UniProt
entry) into ChimeraX's fetch cache ``~/Downloads/ChimeraX/<database>/`` as ScienceBoard's VM
holds them, where ``open <id>`` and ``alphafold match`` find them; ``download`` of an RCSB
entry the cache holds (A-02's ``3ppd.cif``) copies that file instead of downloading it.

``launch`` runs the task's command with a bare ``chimerax`` mapped to the desktop's binary
(``GuestLayout.programs``: a local slot's build of ``scripts/chimerax.sh``; a missing build
makes the step *unavailable*, naming the script), on the desktop's session bus or a private
one it starts (closed with the desktop's processes at reset), and is done when the REST
remote control answers, within :func:`ready_timeout` (not after the task's fixed 7.5 s).

``states`` keys that name an object by the path ScienceBoard's ChimeraX 1.8/1.9 dump reaches
it by are resolved to the path by which this build's (1.12) dump reaches the same object
(:func:`equivalent_key`, :func:`aliases`): the graphics view (through a structure's
``_atoms_drawing`` there, its ``_child_drawings.#0`` here), a structure's or pseudobond
group's drawings, a model reached first as an overlay of the view, a 2D label's name."""

from __future__ import annotations

import json
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any

from coda.contracts.desktop import CheckResult, CheckStatus, StepStatus
from coda.logging import get_logger
from coda.tasks import SetupStep
from worker.providers.client import GuestError
from worker.providers.image import chimerax as build
from worker.tasks import polling
from worker.tasks.adapters.base import AppAdapter
from worker.tasks.answer_errata import AnswerErratum
from worker.tasks.context import CheckError, StepError, TaskContext, params
from worker.tasks.expr import UnsafeExpression, compile_lambda
from worker.tasks.launch import launch_step

log = get_logger(__name__)

STATES_DIR = "/home/user/Downloads"
FETCH_CACHE = "/home/user/Downloads/ChimeraX"
"""ChimeraX's fetch cache in ScienceBoard's VM (``chimerax.core.fetch.cache_directories``)."""
DATA_ENV = "CODA_CHIMERAX_DATA"
DATA = (Path(__file__).resolve().parents[3] / "examples" / "scienceboard" / "chimerax-data"
        / "Downloads" / "ChimeraX")
"""ScienceBoard's pre-placed fetch cache, unmodified (its README: provenance, licences)."""
STORED_SUFFIX = ".data"
"""A cache file stored under its name plus this (``alphafold_database.json``: a ``.json`` in
the examples would be read as a task file) is placed under its own name."""
RCSB_DOWNLOAD = re.compile(r"^https?://files\.rcsb\.org/download/([0-9A-Za-z]{4})\.cif$")
REST_START = re.compile(r"remotecontrol\s+rest\s+start\b.*?\bport\s+(\d+)")
READY_TIMEOUT_S = 180.0
MAX_READY_TIMEOUT_S = 600.0
SESSION_BUS = ('[ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ] || DBUS_SESSION_BUS_ADDRESS=$('
               'dbus-daemon --session --address="unix:tmpdir=${TMPDIR:-/tmp}" --fork '
               '--print-address=1 2>/dev/null | head -n 1); '
               'export DBUS_SESSION_BUS_ADDRESS;')
"""Shell prefix: the desktop's session bus, or a private one (marked like every process the
agent starts, so a reset closes it) where the desktop has none."""


BLOCKERS: dict[str, str] = {
    "B-01": "this build's coulombic fails (it finds no AmberTools 'amberXX' folder for its "
            "charges), so no surface is coloured",
    "D-03": "it needs AlphaFold's prediction service (the network)",
}
"""Tasks of ScienceBoard's ChimeraX folder that cannot get a real verdict with this build,
offline, and why (found by solving them on it: ``tests/worker/test_chimerax_tasks.py``)."""


ERRATA: tuple[AnswerErratum, ...] = (
    AnswerErratum(
        "chimerax", "C-04", "Submit your answer: the number of Hydrogen atoms in /A:1.", ("12",),
        (("9",),),
        "/A:1 of 4r0u is its N-terminal threonine, which carries 9 hydrogens once ChimeraX's "
        "addh has protonated it (H1-H3 on the charged amino terminus, HA, HB, HG1, "
        "HG21-HG23), not 12",
        "issue 38 (point 5): this build's addh gives 9 (tests/worker/test_chimerax_tasks.py); "
        "independently, threonine is C4H9NO3 (9 H as the free zwitterion, NH3+ and COO-), and "
        "an N-terminal residue keeps all of them but the carboxyl's (which it has none of as "
        "a zwitterion): 9; the entry holds no hydrogens and no alternate locations, so no "
        "count of /A:1 reaches 12 (tests/worker/test_chimerax_errata.py counts the entry)"),
)
"""ScienceBoard's ChimeraX answers known to be wrong (:mod:`worker.tasks.answer_errata`)."""


def blocker(task_id: str) -> str | None:
    """Why task ``ChimeraX/<name>`` cannot get a real verdict here (None: it can)."""
    return BLOCKERS.get(task_id.rsplit("/", 1)[-1])


class ChimeraxUnavailable(RuntimeError):
    pass


def run(ctx: TaskContext, command: str) -> tuple[list[str], bool]:
    """(log notes, succeeded) of one ChimeraX command."""
    try:
        reply = ctx.guest.chimerax(ctx.layout.portlike, command)
    except GuestError as exc:
        raise ChimeraxUnavailable(f"ChimeraX remote control: {exc.detail[:300]}") from exc
    return reply.notes, reply.error is None


def _command_step(build: Any) -> Any:
    def handler(ctx: TaskContext, step: SetupStep) -> str:
        command = build(params(step))
        try:
            _, ok = run(ctx, command)
        except ChimeraxUnavailable as exc:
            raise StepError(StepStatus.UNAVAILABLE, str(exc)) from exc
        if not ok:
            raise StepError(StepStatus.FAILED, f"ChimeraX refused {command!r}")
        return f"chimerax: {command}"
    return handler


def _color(p: dict[str, Any]) -> str:
    style = str(p["style"])
    return style if style == "rainbow" else f"color {style}"


def data_dir() -> Path:
    return Path(os.environ.get(DATA_ENV) or DATA)


def cache_files() -> dict[str, Path]:
    """``<database>/<file>`` -> the local copy, for every file of the pre-placed cache."""
    root = data_dir()
    return {str(p.relative_to(root)).removesuffix(STORED_SUFFIX): p
            for p in sorted(root.rglob("*")) if p.is_file()}


def place_fetch_cache(ctx: TaskContext) -> int:
    """Upload the pre-placed cache into the guest's ``~/Downloads/ChimeraX``; how many files."""
    files = cache_files()
    for rel, local in files.items():
        ctx.guest.upload(ctx.rw(f"{FETCH_CACHE}/{rel}"), local.read_bytes())
    return len(files)


def launch_argv(ctx: TaskContext, command: str | list[str]) -> list[str]:
    """The task's launch command as this desktop runs it (pure but for the layout): paths
    rewritten, «PORTLIKE» filled in, and a bare ``chimerax`` program mapped to the desktop's
    binary (a local slot's build) as a whole word."""
    argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    argv = [ctx.rw(a) for a in argv]
    if argv:
        argv[0] = ctx.layout.programs.get(argv[0], argv[0])
    return argv


def rest_port(argv: list[str]) -> int | None:
    """The port of the ``remotecontrol rest start ... port N`` the command line runs, if any."""
    m = REST_START.search(" ".join(argv))
    return int(m.group(1)) if m else None


def ready_timeout(ctx: TaskContext) -> float:
    """How long a launch waits for the REST port: the context's launch timeout, at least
    :data:`READY_TIMEOUT_S` (a cold start takes 6-7 s on an idle machine and several times
    that on a loaded one), at most :data:`MAX_READY_TIMEOUT_S`."""
    return min(max(ctx.launch_timeout_s, READY_TIMEOUT_S), MAX_READY_TIMEOUT_S)


def step_launch(ctx: TaskContext, step: SetupStep) -> str:
    """Start ChimeraX as the task says, on the desktop's session bus (a private one, started
    here and closed with the desktop's other processes, where the desktop has none: else
    each ChimeraX autolaunches a ``dbus-daemon`` that outlives it), with the fetch cache
    placed; done when its REST remote control answers (not after the task's fixed 7.5 s).
    A local slot without a build: *unavailable*, naming the script that builds it."""
    p = params(step)
    argv = launch_argv(ctx, p.get("command") or [])
    if not argv:
        raise StepError(StepStatus.FAILED, "field 'command' is empty")
    port = rest_port(argv)
    found = ctx.guest.execute(f"command -v {shlex.quote(argv[0])}", shell=True)
    if found.returncode not in (0, None):
        where = ("is missing" if argv[0].startswith("/") else "is not on this desktop's PATH")
        raise StepError(StepStatus.UNAVAILABLE, f"ChimeraX is not built here ({argv[0]} "
                        f"{where}): {build.BUILD_HINT}")
    placed = place_fetch_cache(ctx)
    if port is None:  # no remote control to wait on: the generic launch (a new window)
        return f"{launch_step(ctx, step)} (fetch cache: {placed} files)"
    ctx.guest.launch(f"{SESSION_BUS} exec {shlex.join(argv)}", shell=True)
    timeout = ready_timeout(ctx)
    started = time.monotonic()
    try:
        version = polling.wait_for(lambda: _answers(ctx, port), f"its REST remote control on "
                                   f"port {port}", timeout, app="ChimeraX",
                                   not_yet=(ChimeraxUnavailable,), poll_s=0.5)
    except TimeoutError as exc:
        raise StepError(StepStatus.FAILED, str(exc)) from exc
    took = time.monotonic() - started
    log.info("chimerax.ready", port=port, seconds=round(took, 1), version=version)
    return f"ChimeraX ready in {took:.1f} s (REST on port {port}; fetch cache: {placed} files)"


def _answers(ctx: TaskContext, port: int) -> str | None:
    try:
        reply = ctx.guest.chimerax(port, "version")
    except GuestError as exc:
        raise ChimeraxUnavailable(exc.detail[:300]) from exc
    notes = " ".join(reply.notes).strip()
    return (notes or "answering") if reply.error is None else None


def local_copy(url: str) -> Path | None:
    """The cache's copy of an RCSB download URL, if it holds that entry."""
    m = RCSB_DOWNLOAD.match(url)
    if m is None:
        return None
    local = data_dir() / "PDB" / f"{m.group(1).lower()}.cif"
    return local if local.is_file() else None


def step_download(ctx: TaskContext, step: SetupStep) -> str:
    p = params(step)
    local = local_copy(str(p["url"]))
    if local is None:
        raise StepError(StepStatus.UNAVAILABLE,
                        f"no local copy of {p['url']} (ChimeraX's tasks run offline)")
    ctx.guest.upload(ctx.rw(str(p["path"])), local.read_bytes())
    return f"copied {local.name} (for {p['url']})"


STEPS = {
    "launch": step_launch,
    "download": step_download,
    "open": _command_step(lambda p: f"open {p['name']}"),
    "turn": _command_step(lambda p: f"turn {p['axis']} {p['angle']}"),
    "clear_log": _command_step(lambda p: "log clear"),
    "color": _command_step(_color),
    "alphafold_match": _command_step(lambda p: f"alphafold match {p['name']}"),
    "destroy": _command_step(lambda p: "destroy"),
}


def _checked_run(ctx: TaskContext, command: str) -> list[str]:
    try:
        notes, ok = run(ctx, command)
    except ChimeraxUnavailable as exc:
        raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc
    if not ok:
        raise CheckError(CheckStatus.ERROR, f"ChimeraX refused {command!r}")
    return notes


def states_dump(ctx: TaskContext) -> dict[str, Any]:
    """ScienceBoard's ``states <dir> <timestamp>`` dump, read back from the guest (cached for
    the checkers of one evaluation)."""
    if "chimerax_states" not in ctx.scratch:
        stamp = str(int(time.time() * 1000))
        folder = ctx.rw(STATES_DIR)
        _checked_run(ctx, f"states {folder} {stamp}")
        data = ctx.guest.read_file(f"{folder}/{stamp}.json")
        if data is None:
            raise CheckError(CheckStatus.ERROR, "ChimeraX wrote no states dump")
        ctx.scratch["chimerax_states"] = json.loads(data)
    states: dict[str, Any] = ctx.scratch["chimerax_states"]
    return states


def _lambda(source: str) -> Any:
    try:
        return compile_lambda(source)
    except UnsafeExpression as exc:
        raise CheckError(CheckStatus.ERROR, str(exc)) from exc


VIEW_HOP = "._draw_shape.bindings._opengl_context.window.view."
MODEL = re.compile(r"^_state_containers\.models\._models\.\([0-9, ]+\)\.")
MODEL_LIST = "_state_containers.models._models."
DRAWING_ATTRS = {"atoms": "_atoms_drawing", "bonds": "_bonds_drawing", "pbonds": "_pbond_drawing"}
"""A structure's (a pseudobond group's) drawing, by its name, and the attribute that holds it."""
CHILD_NAME = re.compile(r"^(.*)\._child_drawings\.#\d+\.name$")
OVERLAY_ID = re.compile(r"^(.*\.view\._overlays\.#\d+(?:\._child_drawings\.#\d+)*)\._id\.#0$")
LABEL_NAME = re.compile(r"^(.*\.label)\.name$")
MAX_HOPS = 4


def aliases(states: dict[str, Any]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """How this build's (1.12) dump reaches objects that ScienceBoard's ChimeraX 1.8/1.9 dumps
    reach by another path (pure): (single keys: theirs -> ours, prefixes: [(theirs, ours)],
    longest first). The dump names each object once, by the first path it walks to it, so
    the same object has another key where 1.12 walks another way first:

    - a structure's atoms/bonds drawing and a pseudobond group's drawing (``_atoms_drawing``,
      ``_bonds_drawing``, ``_pbond_drawing``): 1.12 reaches it first as the model's child
      drawing of that name (``atoms``, ``bonds``, ``pbonds``); never where the attribute is
      itself in the dump (``None``: no such drawing);
    - a model that 1.12 reaches first as an overlay of the graphics view (a colour key, 2D
      labels): its place in the model list, ``_models.(<its id>)``, where the list holds
      nothing under that id;
    - a 2D label's model's name (``<label>.drawing._name``): 1.8/1.9 name the model after the
      label (``scalebar``), 1.12 renames it after the label's text, and reaches the label
      first from its model (``<model>.label``, whose ``drawing`` is that model, itself in the
      dump with its ``_name``): the label's own ``name``."""
    keys: dict[str, str] = {}
    prefixes: list[tuple[str, str]] = []
    for key, value in states.items():
        child = CHILD_NAME.match(key)
        if child and isinstance(value, str) and value in DRAWING_ATTRS:
            attr = f"{child.group(1)}.{DRAWING_ATTRS[value]}"
            if attr not in states:
                prefixes.append((attr + ".", key.removesuffix("name")))
            continue
        overlay = OVERLAY_ID.match(key)
        if overlay:
            ours = overlay.group(1)
            ids, n = [], 0
            while f"{ours}._id.#{n}" in states:
                ids.append(int(states[f"{ours}._id.#{n}"]))
                n += 1
            theirs = f"{MODEL_LIST}{tuple(ids)}."
            if not any(k.startswith(theirs) for k in states):
                prefixes.append((theirs, ours + "."))
            continue
        label = LABEL_NAME.match(key)
        if (label and f"{label.group(1).removesuffix('.label')}._name" in states
                and f"{label.group(1)}.drawing._name" not in states):
            keys[f"{label.group(1)}.drawing._name"] = key
    prefixes.sort(key=lambda p: -len(p[0]))
    return keys, prefixes


def _view_key(states: dict[str, Any], key: str) -> str | None:
    if key.count(VIEW_HOP) != 1:
        return None
    head, tail = key.split(VIEW_HOP)
    model = MODEL.match(head)
    if model is None:
        return None
    ending = VIEW_HOP + tail
    return next((k for k in states if k.startswith(model.group(0)) and k.endswith(ending)
                 and k.count(VIEW_HOP) == 1), None)


def equivalent_key(states: dict[str, Any], key: str,
                   known: tuple[dict[str, str], list[tuple[str, str]]] | None = None
                   ) -> str | None:
    """``key`` itself when the dump has it; else the key by which this build's dump reaches
    the same attribute of the same object (pure): by :func:`aliases`, then, for a key into
    the graphics view (a single object of the session, which the dump reaches through the
    first drawing of a model that holds it), from the same model. ScienceBoard's ChimeraX
    1.8/1.9 dumps reach the view through a structure's ``_atoms_drawing``; this build (1.12)
    through its ``_child_drawings.#0``: the same view, another path, and the tasks' keys
    name the former."""
    if key in states:
        return key
    singles, prefixes = aliases(states) if known is None else known
    for _ in range(MAX_HOPS):
        if key in singles:
            return singles[key]
        nxt = next((ours + key[len(theirs):] for theirs, ours in prefixes
                    if key.startswith(theirs)), None)
        if nxt is None:
            break
        if nxt in states:
            return nxt
        key = nxt
    return _view_key(states, key)


def findable_states(states: dict[str, Any],
                    known: tuple[dict[str, str], list[tuple[str, str]]]) -> dict[str, Any]:
    """The dump's entries, with those of :func:`aliases` under ScienceBoard's keys for a
    ``find`` to match: a single key, and the direct attributes (``<prefix>_name``) of an
    aliased object (its whole subtree would double the dump)."""
    singles, prefixes = known
    found = dict(states)
    for theirs, ours in singles.items():
        found.setdefault(theirs, states[ours])
    for theirs, ours in prefixes:
        for key, value in states.items():
            if key.startswith(ours) and "." not in key[len(ours):]:
                found.setdefault(theirs + key[len(ours):], value)
    return found


def check_states(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    states = states_dump(ctx)
    known = aliases(states)
    via = ""
    key_src: str = item["key"]
    check_null = "value" in item and item["value"] is None
    if "find" in item:
        find = _lambda(item["find"])
        keys = [k for k, v in findable_states(states, known).items() if find(k, v)]
        if check_null:
            return _states_result(not keys, "no entry expected")
        if not keys:
            return _states_result(False, "nothing matched 'find'")
        raw_key = _lambda(key_src)(keys[0])
        if keys[0] not in states:
            via = f"found as {equivalent_key(states, keys[0], known)}"
    elif key_src.startswith("lambda"):
        keys = [k for k in states if _lambda(key_src)(k)]
        if check_null:
            return _states_result(not keys, "no entry expected")
        if not keys:
            return _states_result(False, "no key matched")
        raw_key = keys[0]
    else:
        if check_null:
            return _states_result(key_src not in states, f"{key_src} must be absent")
        raw_key = key_src
    found = equivalent_key(states, raw_key, known)
    if found is None:
        return _states_result(False, f"{raw_key} not in the session state")
    value = states[found]
    if found != raw_key:
        raw_key = f"{raw_key} (reached as {found})"
    if via:
        raw_key = f"{raw_key} ({via})"
    if item.get("pattern") is not None:
        text = value if isinstance(value, str) else json.dumps(value)
        return _states_result(re.search(item["pattern"], text) is not None, raw_key)
    if item.get("value") is not None:
        return _states_result(item["value"] == value, raw_key)
    return _states_result(False, f"{raw_key}: neither value nor pattern given")


def _states_result(ok: bool, detail: str) -> CheckResult:
    return CheckResult(type="states", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=detail)


def check_info(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    notes = _checked_run(ctx, f"info {item['key']}")
    lines = {line for note in notes for line in note.strip().split("\n") if line != ""}
    ok = lines == set(item["value"])
    return CheckResult(type="info", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=f"info {item['key']}: {len(lines)} lines")


def check_file(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    value = item["value"]
    if isinstance(value, str) and value.startswith("lambda"):
        value = _lambda(value)()
    data = ctx.guest.read_file(ctx.rw(item["key"]))
    ok = data is not None and str(value) in data.decode("utf-8", "replace")
    return CheckResult(type="file", status=CheckStatus.PASS if ok else CheckStatus.FAIL,
                       detail=f"{item['key']} contains {str(value)[:60]!r}")


CHIMERAX = AppAdapter(
    name="ChimeraX",
    steps=STEPS,
    checkers={"states": check_states, "info": check_info, "file": check_file},
)
