#!/usr/bin/python3
"""CODA's state reader for GRASS GIS's wxGUI, loaded into the GUI's own process.

GRASS starts its GUI as ``[$GRASS_PYTHON, .../wxgui.py]``; the GRASS adapter's ``launch`` names
this file (through a small wrapper) as ``GRASS_PYTHON``. Run with ``wxgui.py`` as its first
argument it starts a thread serving the GUI's state on a Unix socket (``$CODA_GRASS_SOCKET``,
default ``$HOME/.coda/grass-gui.sock``, mode 0600: no port is opened), then runs ``wxgui.py``
as ``__main__`` as GRASS would (wxWidgets' log switched off first, as ``wxgui.py`` itself
does a moment later: :func:`quiet_wx_log`); with any other arguments it is plain ``python3`` (GRASS
checks its Python with ``GRASS_PYTHON`` reading a script on standard input). No file of GRASS is
changed. The guest agent's ``/coda/grass`` route is its only client.

Protocol: one JSON line ``{"op": ..., "args": {...}}`` in, one JSON line ``{"ok": true,
"result": ...}`` or ``{"ok": false, "error": ...}`` out. Every operation on the GUI runs on the
GUI's main thread (``wx.CallAfter``) and is bounded by ``args["timeout_s"]``.

Operations (the keys ScienceBoard's task checkers read, the steps its setup calls):

* ``ready``: whether the Layer Manager, a map display and the data catalog exist, whether the
  first map display is rendering (a render pending on its timer or under way), and the
  session's location and mapset;
* ``dump``: ``layers`` (every layer of the map: its attributes), ``windows`` (the layer tree's
  items that hold a window: their attributes, ``_data`` = (layer info, the properties dialog's
  options) and the map layer's ``name``), ``toolbars`` (``keys``, ``shown``: the map toolbar
  is shown, ``layer``: the layer the vector digitizer edits), ``statusbar`` (``mode``: the
  index of the item shown, ``scale``), ``region`` (the map display's region), ``output`` (the
  console's text). Layers and windows come from the newest display's layer tree, the rest from
  the first map display (ScienceBoard's "Map Display 1");
* ``map``: switch to a mapset (the data catalog's switch, no confirmation);
* ``layer``: display a map the data catalog lists (as a double click on it does);
* ``scale``: set the first map display's scale and start its render (done when ``ready`` says
  it no longer renders);
* ``gcmd``: run a GRASS module in the GUI's session and return its exit code and output;
* ``restart``: bring the running GUI back to a fresh launch's state without relaunching it
  (dialogs closed, the session in ``args``' mapset, a new workspace: every map display closed
  and one new one opened, as GRASS does on a switch to another location; the console cleared,
  the Data tab shown): the adapter's ``launch`` when this GUI is already up in the slot;
* ``rects``: where some widgets are on the screen (the Layer Manager's tabs, the console's
  prompt, the layer tree's items, the map window, the map display's statusbar and the widget
  its current mode shows, and whether that widget has the keyboard focus), whether a popup
  menu is open and whether the map display is rendering, for scripted solutions and
  recordings.
"""

from __future__ import annotations

import json
import math
import os
import runpy
import socketserver
import sys
import threading
import traceback
from typing import Any

DEFAULT_TIMEOUT_S = 30.0
MAX_LINE = 1 << 20


def socket_path() -> str:
    return os.environ.get("CODA_GRASS_SOCKET") or os.path.join(
        os.environ.get("HOME", "/tmp"), ".coda", "grass-gui.sock")


# --------------------------------------------------------------------------- plain values


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def plain(value: Any) -> Any:
    """JSON data of ``value``: an object's attributes (one level), containers as they are, any
    value JSON cannot hold as ``"N/A"`` (ScienceBoard's dump does the same)."""
    if value is None:
        return None
    data = vars(value) if hasattr(value, "__dict__") else value
    try:
        text = json.dumps(data, default=lambda _: "N/A", skipkeys=True)
    except ValueError:  # a container that holds itself
        return "N/A"
    return finite(json.loads(text))


# --------------------------------------------------------------------------- the GUI


def wx_module() -> Any:
    import wx  # the GUI's wxPython, present once wxgui.py runs

    return wx


def layer_manager() -> Any:
    wx = wx_module()
    if wx.GetApp() is None:
        return None
    for window in wx.GetTopLevelWindows():
        if type(window).__name__ == "GMFrame":
            return window
    return None


def need_frame() -> Any:
    frame = layer_manager()
    if frame is None:
        raise LookupError("the GRASS GIS Layer Manager is not open")
    return frame


def displays(frame: Any) -> list[Any]:
    found = frame.GetAllMapDisplays() if hasattr(frame, "GetAllMapDisplays") else [
        frame.GetMapDisplay()]
    return [d for d in found or [] if d is not None]


def first_display(frame: Any) -> Any:
    found = displays(frame)
    if not found:
        raise LookupError("no map display is open")
    return found[0]


def layer_tree(frame: Any) -> Any:
    panel = getattr(frame, "pg_panel", None)
    tree = getattr(panel, "maptree", None) if panel is not None else None
    tree = tree or frame.GetLayerTree()
    if tree is None:
        raise LookupError("no layer tree is open")
    return tree


def catalog_tree(frame: Any) -> Any:
    return frame.datacatalog.tree


def rendering(display: Any) -> bool:
    """Whether ``display`` has a render pending or under way: a map update waits on its timer
    (``UpdateMap`` starts the render from a timer thread, after the call returns) or the
    render manager renders (until its ``OnRenderDone``)."""
    window = display.GetWindow()
    pending = getattr(window, "timerRunId", None) is not None
    return pending or bool(getattr(display.Map.GetRenderMgr(), "_rendering", False))


def op_ready(_: dict[str, Any]) -> dict[str, Any]:
    frame = layer_manager()
    if frame is None:
        return {"frame": False, "display": False, "catalog": False}
    tree = catalog_tree(frame)
    from grass.script import gisenv

    env = gisenv()
    found = displays(frame)
    return {
        "frame": bool(frame.IsShown()),
        "display": bool(found),
        "rendering": rendering(found[0]) if found else False,
        "catalog": bool(tree._model.root.children) and not hasattr(tree, "busy"),
        "single_window": type(frame).__module__.startswith("main_window"),
        "gisdbase": env.get("GISDBASE"), "location": env.get("LOCATION_NAME"),
        "mapset": env.get("MAPSET"),
    }


def toolbar_layer(toolbars: dict[str, Any]) -> Any:
    vdigit = toolbars.get("vdigit")
    if vdigit is None:
        return None
    return plain(getattr(vdigit, "mapLayer", None))


def item_name(item: Any) -> Any:
    info = item.GetData()[0] if item.GetData() else None
    layer = info.get("maplayer") if isinstance(info, dict) else None
    return getattr(layer, "name", None)


def op_dump(_: dict[str, Any]) -> dict[str, Any]:
    frame = need_frame()
    tree = layer_tree(frame)
    display = first_display(frame)
    toolbars = dict(display.toolbars)
    statusbar = display.statusbarManager
    return {
        "layers": [plain(layer) for layer in tree.Map.layers],
        "windows": [{"name": item_name(item), **plain(item)}
                    for item in tree._itemWithWindow],
        "toolbars": {
            "keys": list(toolbars),
            "shown": bool(toolbars["map"].IsShown()) if "map" in toolbars else False,
            "layer": toolbar_layer(toolbars),
        },
        "statusbar": {"mode": statusbar.GetMode() if statusbar else None,
                      "scale": finite(display.GetMapScale())},
        "region": plain(dict(display.Map.region)),
        "output": frame.goutput.cmdOutput.GetText(),
    }


def op_map(args: dict[str, Any]) -> dict[str, Any]:
    frame = need_frame()
    switched = catalog_tree(frame).SwitchMapset(
        grassdb=args["grassdb"], location=args["location"], mapset=args["mapset"],
        show_confirmation=False)
    return {"switched": bool(switched)}


MAP_TYPES = ("raster", "vector", "raster_3d")


def op_layer(args: dict[str, Any]) -> dict[str, Any]:
    frame = need_frame()
    tree = catalog_tree(frame)
    query = dict(args["query"])
    nodes = [n for n in tree._model.SearchNodes(**query) if n.data.get("type") in MAP_TYPES]
    if not nodes:
        return {"found": False}
    tree.OnDoubleClick(nodes[0])
    return {"found": True, "type": nodes[0].data.get("type")}


def op_scale(args: dict[str, Any]) -> dict[str, Any]:
    display = first_display(need_frame())
    display.SetMapScale(float(args["scale"]))
    display.OnRender(None)
    return {"scale": finite(display.GetMapScale())}


def op_gcmd(args: dict[str, Any]) -> dict[str, Any]:
    from core.gcmd import RunCommand

    kwargs = dict(args.get("kwargs") or {})
    code, out, err = RunCommand(str(args["cmd"]), read=True, getErrorMsg=True, **kwargs)
    return {"returncode": code, "stdout": out or "", "stderr": err or ""}


def op_restart(args: dict[str, Any]) -> dict[str, Any]:
    frame = need_frame()
    wx = wx_module()
    for window in wx.GetTopLevelWindows():  # dialogs a solution left open
        if isinstance(window, wx.Dialog) and window.IsShown():
            if window.IsModal():
                window.EndModal(wx.ID_CANCEL)
            window.Destroy()
    from grass.script import gisenv

    env = gisenv()
    here = (env.get("GISDBASE"), env.get("LOCATION_NAME"), env.get("MAPSET"))
    want = (args["grassdb"], args["location"], args["mapset"])
    if here != want and not catalog_tree(frame).SwitchMapset(
            grassdb=want[0], location=want[1], mapset=want[2], show_confirmation=False):
        return {"switched": False}
    if here[:2] == want[:2]:
        # a switch to another location closes the workspace and opens a new one (one new map
        # display, numbered from 1 again); within a location do the same
        frame.OnWorkspaceClose()
        frame.OnWorkspaceNew()
    frame.goutput.OnOutputClear(None)
    frame.notebook.SetSelectionByName("catalog")
    return {"switched": True, "displays": len(displays(frame))}


def rect(window: Any) -> list[int] | None:
    if window is None or not window.IsShownOnScreen():
        return None
    r = window.GetScreenRect()
    return [r.x, r.y, r.width, r.height]


def op_rects(_: dict[str, Any]) -> dict[str, Any]:
    frame = need_frame()
    display = first_display(frame)
    tree = layer_tree(frame)
    out: dict[str, Any] = {
        "layer_manager": rect(frame), "map_display": rect(display),
        "map_window": rect(display.GetWindow()), "prompt": rect(frame.goutput.cmdPrompt),
        "layer_tree": rect(tree),
    }
    items = []
    for item in tree._itemWithWindow:
        box = tree.GetBoundingRect(item, textOnly=True)
        if box is not None:
            x, y = tree.ClientToScreen((box.x, box.y))
            items.append({"name": item_name(item), "text": item.GetText(),
                          "rect": [x, y, box.width, box.height]})
    out["layer_items"] = items
    manager = display.statusbarManager
    if manager is not None:
        item = list(manager.statusbarItems.values())[manager.GetMode()]
        widget = getattr(item, "widget", None)
        focus = wx_module().Window.FindFocus()
        out["statusbar"] = rect(manager.statusbar)
        out["statusbar_widget"] = rect(widget)
        focused = [focus, focus.GetParent()] if focus is not None else []
        out["statusbar_focused"] = widget is not None and widget.GetHandle() in [
            w.GetHandle() for w in focused if w is not None]  # wx gives new proxies: no `is`
    out["menu_open"] = MENUS["open"] > 0
    out["rendering"] = rendering(display)
    out["tabs"] = tabs(frame.notebook)
    out["page"] = frame.notebook.GetPageText(frame.notebook.GetSelection())
    return out


def tabs(notebook: Any) -> dict[str, list[int]]:
    """Screen points on each tab of a notebook (its label -> [x, y]), found by hit-testing."""
    found: dict[str, list[int]] = {}
    width, height = notebook.GetClientSize()
    for y in range(height - 2, max(height - 60, 0), -4):
        for x in range(2, width, 6):
            page, _ = notebook.HitTest((x, y))
            if page >= 0:
                label = notebook.GetPageText(page)
                if label not in found:
                    sx, sy = notebook.ClientToScreen((x + 12, y))
                    found[label] = [sx, sy]
        if found:
            break
    return found


MENUS: dict[str, Any] = {"open": 0}  # popup menus shown now (a wx event filter counts)


def watch_menus() -> None:
    """Count the GUI's open menus from now on (once): a scripted solution waits for a context
    menu to be up before it sends keys to it, as a person waits to see it."""
    if MENUS.get("watching"):
        return
    wx = wx_module()
    opened, closed = wx.wxEVT_MENU_OPEN, wx.wxEVT_MENU_CLOSE

    class MenuWatch(wx.EventFilter):  # type: ignore[name-defined]
        def FilterEvent(self, event: Any) -> int:
            kind = event.GetEventType()
            if kind == opened:
                MENUS["open"] += 1
            elif kind == closed:
                MENUS["open"] = max(0, MENUS["open"] - 1)
            return -1  # wx.EventFilter.Event_Skip: processed as usual

    MENUS["filter"] = MenuWatch()
    wx.EvtHandler.AddFilter(MENUS["filter"])
    MENUS["watching"] = 1


MAIN_THREAD_OPS = {"ready": op_ready, "dump": op_dump, "map": op_map, "layer": op_layer,
                   "scale": op_scale, "restart": op_restart, "rects": op_rects}
THREAD_OPS = {"gcmd": op_gcmd}


# --------------------------------------------------------------------------- serving


def on_main_thread(fn: Any, args: dict[str, Any], timeout: float) -> Any:
    wx = wx_module()
    if wx.GetApp() is None:
        raise LookupError("the GUI has not started yet")
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            watch_menus()
            box["result"] = fn(args)
        except Exception as exc:  # noqa: BLE001 - any GUI error goes back to the client, typed
            box["error"] = f"{type(exc).__name__}: {exc}"
            box["trace"] = traceback.format_exc(limit=5)
        finally:
            done.set()

    wx.CallAfter(run)
    if not done.wait(timeout):
        raise TimeoutError(f"the GUI's main thread did not run {fn.__name__} within "
                           f"{timeout:g} s (a modal dialog or a long job holds it)")
    if "error" in box:
        raise RuntimeError(box["error"])
    return box["result"]


def handle(request: dict[str, Any]) -> dict[str, Any]:
    op = str(request.get("op", ""))
    args = dict(request.get("args") or {})
    timeout = float(args.pop("timeout_s", DEFAULT_TIMEOUT_S))
    try:
        if op in MAIN_THREAD_OPS:
            result = on_main_thread(MAIN_THREAD_OPS[op], args, timeout)
        elif op in THREAD_OPS:
            result = THREAD_OPS[op](args)
        else:
            return {"ok": False, "error": f"unknown operation {op!r}"}
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the client, named
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "result": finite(result)}


class Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline(MAX_LINE)
        try:
            request = json.loads(line)
        except ValueError:
            reply: dict[str, Any] = {"ok": False, "error": "the request is not one JSON line"}
        else:
            reply = handle(request if isinstance(request, dict) else {})
        self.wfile.write(json.dumps(reply).encode() + b"\n")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(path: str) -> Server:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)  # a socket left by an earlier GUI
    old = os.umask(0o177)
    try:
        server = Server(path, Handler)
    finally:
        os.umask(old)
    threading.Thread(target=server.serve_forever, name="coda-grass-state", daemon=True).start()
    return server


def quiet_wx_log() -> None:
    """wxWidgets' log off from the start, as ``wxgui.py`` turns it off (``wx.LogNull``) right
    after creating its application: else, under a locale wxWidgets does not know (C.UTF-8),
    creating the application pops up a modal "Cannot set locale to language" warning that
    blocks the GUI until someone closes it."""
    try:
        wx_module().Log.EnableLogging(False)
    except ImportError as exc:  # wxgui.py will report the missing wxPython itself
        sys.stderr.write(f"coda: wxPython not found: {exc}\n")


def main(argv: list[str]) -> None:
    if len(argv) < 2 or os.path.basename(argv[1]) != "wxgui.py":
        os.execv(sys.executable, [sys.executable, *argv[1:]])
    script = argv[1]
    try:
        serve(socket_path())
    except OSError as exc:  # the GUI runs all the same; the agent reports it unreadable
        sys.stderr.write(f"coda: GRASS GUI state reader not started: {exc}\n")
    quiet_wx_log()
    sys.argv = argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
