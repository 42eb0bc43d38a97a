"""GRASS GIS's setup steps (``launch``, ``map``, ``layer``, ``scale``), done through the state
reader inside the GUI (:mod:`.gui`):

* ``launch`` uploads the reader and names it as ``GRASS_PYTHON`` for the task's command; a
  ``gnome-terminal --`` the desktop lacks becomes ``xterm -e`` (the same GUI, in another
  terminal). It is done when the Layer Manager, a map display and the data catalog are up.
  When a GUI with the reader is already up in the slot (an earlier task's, no reset since: a
  second GRASS session on the same mapset would share its lock), that GUI is brought back to
  a fresh launch's state instead (a new workspace: one new map display, as a switch to
  another location makes; dialogs closed, the console cleared, the session in the mapset the
  command names): several tasks then share
  one GUI; the data sets are restored only by the slot's reset. Before launching, the start
  mapset must be in the slot and, where the database is the project's stand-in (it holds
  ``.coda-standin``), built by this checkout's ``grassdata.py``: else the step fails at once,
  naming the fix (a GUI on a missing mapset never gets ready).
* ``map`` switches the session's mapset as the data catalog does (no confirmation), done when
  the session is in it; ``layer`` displays the first map the catalog lists under the query's
  name, done when the layer is in the map; ``scale`` sets the first map display's scale, done
  when the display no longer renders.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from coda.contracts.desktop import GrassOp, StepStatus
from coda.logging import get_logger
from coda.tasks import SetupStep
from worker.providers.image import grassdata
from worker.tasks.adapters.base import StepHandler
from worker.tasks.adapters.grass import gui
from worker.tasks.context import StepError, TaskContext, params

log = get_logger(__name__)

READY_TIMEOUT_S = 180.0
STEP_TIMEOUT_S = 60.0
TERMINAL = "gnome-terminal --"
FALLBACK_TERMINAL = "xterm -e"


def _step_errors(fn: Any) -> Any:
    def handler(ctx: TaskContext, step: SetupStep) -> str:
        try:
            return str(fn(ctx, params(step)))
        except gui.Unreadable as exc:
            raise StepError(StepStatus.UNAVAILABLE, str(exc)) from exc
        except (gui.GuiError, TimeoutError) as exc:
            raise StepError(StepStatus.FAILED, str(exc)) from exc
    handler.__name__ = fn.__name__
    return handler


def _terminal(ctx: TaskContext, command: str) -> str:
    if TERMINAL not in command:
        return command
    found = ctx.guest.execute("command -v gnome-terminal", shell=True)
    if found.returncode == 0:
        return command
    return command.replace(TERMINAL, FALLBACK_TERMINAL)


START_MAPSET = re.compile(r"\bgrass\s+(?:-\S+\s+)*([^\s\"']+)")


def start_mapset(command: str) -> dict[str, str] | None:
    """The database, location and mapset ``grass [--flags] PATH`` starts in (pure)."""
    found = START_MAPSET.search(command)
    parts = found.group(1).rstrip("/").rsplit("/", 2) if found else []
    if len(parts) != 3 or not all(parts):
        return None
    return {"grassdb": parts[0], "location": parts[1], "mapset": parts[2]}


def _running(ctx: TaskContext) -> bool:
    try:
        return gui.ready(ctx) is not None
    except gui.Unreadable:
        return False


def restart(ctx: TaskContext, start: dict[str, str]) -> str:
    """The GUI already up in the slot brought back to a fresh launch's state (module doc)."""
    reply = gui.call(ctx, GrassOp.RESTART, timeout_s=STEP_TIMEOUT_S, **start)
    if not reply.get("switched"):
        raise gui.GuiError(f"the data catalog refused to switch to {start['location']}/"
                           f"{start['mapset']}")

    def fresh() -> dict[str, Any] | None:
        state = gui.ready(ctx)
        return state if state and state.get("location") == start["location"] else None

    gui.wait_for(fresh, "the restarted GUI in its start location", READY_TIMEOUT_S)
    log.info("grass.restarted", location=start["location"], mapset=start["mapset"])
    return f"GRASS GIS GUI restarted in {start['location']}/{start['mapset']}"


BUILD_HINT = ("build them with scripts/desktop-deps.sh (a local slot: /usr/bin/python3 "
              "worker/providers/image/grassdata.py), or rebuild the desktop image "
              "(scripts/docker-build.sh desktop)")


def check_data(ctx: TaskContext, start: dict[str, str]) -> None:
    """The start mapset is in the slot, and a stand-in database is this checkout's (else
    :class:`StepError`, naming the fix)."""
    mapset = "/".join((start["grassdb"], start["location"], start["mapset"]))
    found = ctx.guest.execute(["test", "-d", mapset])
    if found.returncode not in (0, None):
        raise StepError(StepStatus.UNAVAILABLE, f"GRASS GIS's start mapset {mapset} is missing "
                        f"from the slot (its data sets are not built, or are stale): "
                        f"{BUILD_HINT}")
    stamp = ctx.guest.read_file(f"{start['grassdb']}/{grassdata.STAMP}")
    if stamp is not None and stamp.decode(errors="replace").strip() != grassdata.source_hash():
        raise StepError(StepStatus.UNAVAILABLE, f"GRASS GIS's stand-in data sets in "
                        f"{start['grassdb']} are stale (built by another grassdata.py than "
                        f"this checkout's): {BUILD_HINT}")


def launch(ctx: TaskContext, p: dict[str, Any]) -> str:
    if not p.get("command"):
        raise gui.GuiError("field 'command' is empty")
    start = start_mapset(ctx.rw(p["command"]))
    if start is not None and _running(ctx):
        return restart(ctx, start)
    if start is not None:
        check_data(ctx, start)
    wrapper = gui.install_reader(ctx)
    command = f"GRASS_PYTHON={shlex.quote(wrapper)} {_terminal(ctx, ctx.rw(p['command']))}"
    ctx.guest.launch(command, shell=True)
    state = gui.wait_for(lambda: gui.ready(ctx), "the Layer Manager, a map display and the "
                         "data catalog of the GUI", READY_TIMEOUT_S)
    log.info("grass.ready", location=state.get("location"), mapset=state.get("mapset"))
    return f"GRASS GIS GUI ready in {state.get('location')}/{state.get('mapset')}"


def switch_map(ctx: TaskContext, p: dict[str, Any]) -> str:
    grassdb, location, mapset = ctx.rw(p["grassdb"]), str(p["location"]), str(p["mapset"])
    reply = gui.call(ctx, GrassOp.MAP, grassdb=grassdb, location=location, mapset=mapset,
                     timeout_s=STEP_TIMEOUT_S)
    if not reply.get("switched"):
        raise gui.GuiError(f"the data catalog refused to switch to {location}/{mapset}")

    def there() -> bool:
        state = gui.ready(ctx)
        return bool(state and state.get("location") == location
                    and state.get("mapset") == mapset)

    gui.wait_for(there, f"the session in {location}/{mapset}", STEP_TIMEOUT_S)
    return f"switched to {location}/{mapset}"


def add_layer(ctx: TaskContext, p: dict[str, Any]) -> str:
    query = dict(p["query"])
    name = str(query.get("name", ""))
    gui.wait_for(lambda: gui.call(ctx, GrassOp.LAYER, query=query).get("found"),
                 f"map {name!r} in the data catalog", STEP_TIMEOUT_S)

    def shown() -> bool:
        return any(str(layer.get("name", "")).split("@")[0] == name
                   for layer in gui.dump(ctx)["layers"])

    gui.wait_for(shown, f"layer {name!r} in the map", STEP_TIMEOUT_S)
    return f"displayed {name}"


def set_scale(ctx: TaskContext, p: dict[str, Any]) -> str:
    """Set the first map display's scale; done when its render has ended (GRASS starts it from
    a timer after the call returns: an agent acting during it, e.g. switching the statusbar's
    mode, races the render's own statusbar update)."""
    reply = gui.call(ctx, GrassOp.SCALE, scale=float(p["scale"]), timeout_s=STEP_TIMEOUT_S)

    def rendered() -> bool:
        state = gui.ready(ctx)
        return state is not None and not state.get("rendering", True)

    gui.wait_for(rendered, "the map display rendered at the new scale", STEP_TIMEOUT_S)
    return f"map scale 1:{gui.dump(ctx)['statusbar']['scale']} (asked 1:{reply.get('scale')})"


STEPS: dict[str, StepHandler] = {"launch": _step_errors(launch), "map": _step_errors(switch_map),
                                 "layer": _step_errors(add_layer),
                                 "scale": _step_errors(set_scale)}
