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

``states`` keys into the graphics view are resolved to the path by which this build's dump
reaches the same view (:func:`equivalent_key`): ScienceBoard's ChimeraX 1.8/1.9 reaches it
through a structure's ``_atoms_drawing``, this build (1.12) through ``_child_drawings.#0``."""

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
    **dict.fromkeys(("B-02", "B-03", "B-04"), "its checker's keys name the pseudobond or "
                    "centroid drawing as ChimeraX 1.8/1.9's state dump reaches it; this build's "
                    "(1.12) dump reaches it by another path"),
    "B-05": "its checker finds the colour key as a model ('…)._name'); this build's (1.12) "
            "state dump reaches it as an overlay of the view",
    "B-06": "its checker finds the scale bar by a label drawing's '_name'; this build's (1.12) "
            "state dump holds the label's 'name' instead",
    "C-04": "its answer (12) is not this build's: after addh, /A:1 (4r0u's N-terminal THR) has "
            "9 hydrogens (H1-H3, HA, HB, HG1, HG21-HG23), as an N-terminal threonine has",
    "D-03": "it needs AlphaFold's prediction service (the network)",
}
"""Tasks of ScienceBoard's ChimeraX folder that cannot get a real verdict with this build,
offline, and why (found by solving them on it: ``tests/worker/test_chimerax_tasks.py``)."""


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


def equivalent_key(states: dict[str, Any], key: str) -> str | None:
    """``key`` itself when the dump has it; else, for a key into the graphics view (a single
    object of the session, which the dump reaches through the first drawing of a model that
    holds it), the key by which this build's dump reaches the same attribute of the view from
    the same model (pure). ScienceBoard's ChimeraX 1.8/1.9 dumps reach the view through a
    structure's ``_atoms_drawing``; this build (1.12) through its ``_child_drawings.#0``:
    the same view, another path, and the tasks' keys name the former."""
    if key in states:
        return key
    if key.count(VIEW_HOP) != 1:
        return None
    head, tail = key.split(VIEW_HOP)
    model = MODEL.match(head)
    if model is None:
        return None
    ending = VIEW_HOP + tail
    return next((k for k in states if k.startswith(model.group(0)) and k.endswith(ending)
                 and k.count(VIEW_HOP) == 1), None)


def check_states(ctx: TaskContext, item: dict[str, Any]) -> CheckResult:
    states = states_dump(ctx)
    key_src: str = item["key"]
    check_null = "value" in item and item["value"] is None
    if "find" in item:
        find = _lambda(item["find"])
        keys = [k for k, v in states.items() if find(k, v)]
        if check_null:
            return _states_result(not keys, "no entry expected")
        if not keys:
            return _states_result(False, "nothing matched 'find'")
        raw_key = _lambda(key_src)(keys[0])
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
    found = equivalent_key(states, raw_key)
    if found is None:
        return _states_result(False, f"{raw_key} not in the session state")
    value = states[found]
    if found != raw_key:
        raw_key = f"{raw_key} (reached as {found})"
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
