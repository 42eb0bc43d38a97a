"""The agent's own X connection: screen size, cursor position and the window list (EWMH)."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from Xlib import X, display, error

from coda.contracts.desktop import PopupInfo, WindowInfo
from worker.guest.capture import DisplayUnavailable

X_GONE = (error.DisplayError, error.ConnectionClosedError, error.XauthError, error.XNoAuthError,
          OSError)
"""What python-xlib raises when the X server is not there, refuses us or dropped the
connection (its socket's OSError included)."""


def ensure_xauthority() -> None:
    """python-xlib refuses to connect when no authority file exists; an empty one means "no
    cookie", which is what an Xvfb without access control expects."""
    if os.environ.get("XAUTHORITY") or (Path.home() / ".Xauthority").exists():
        return
    path = Path(tempfile.gettempdir()) / f"coda-empty-xauthority-{os.getuid()}"
    path.touch(exist_ok=True)
    os.environ["XAUTHORITY"] = str(path)


class XSession:
    """A lazily opened python-xlib connection guarded by a lock; reconnects after an error.
    A display that is gone is :class:`DisplayUnavailable` (the routes answer 503)."""

    def __init__(self, name: str | None) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._d: Any = None

    def _display(self) -> Any:
        if self._d is None:
            ensure_xauthority()
            self._d = display.Display(self.name)
        return self._d

    def _call(self, fn: Any) -> Any:
        with self._lock:
            try:
                return fn(self._display())
            except X_GONE as exc:
                self._d = None
                raise DisplayUnavailable(
                    f"display {self.name}: {type(exc).__name__}: {exc}") from exc

    def screen_size(self) -> tuple[int, int]:
        return self._call(lambda d: (d.screen().width_in_pixels, d.screen().height_in_pixels))

    def cursor_position(self) -> tuple[int, int]:
        def q(d: Any) -> tuple[int, int]:
            p = d.screen().root.query_pointer()
            return int(p.root_x), int(p.root_y)
        return self._call(q)

    def windows(self) -> list[WindowInfo]:
        """Top-level client windows the window manager lists (``_NET_CLIENT_LIST``)."""
        return self._call(_client_windows)

    def popups(self) -> list[PopupInfo]:
        """Menus, drop-downs and tooltips on screen now (mapped override-redirect windows)."""
        return self._call(_popups)


def _client_windows(d: Any) -> list[WindowInfo]:
    root = d.screen().root
    prop = root.get_full_property(d.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
    out = []
    for wid in (prop.value if prop is not None else []):
        w = d.create_resource_object("window", wid)
        try:
            out.append(_window_info(d, w))
        except error.XError:  # a window that closed while we looked
            continue
    return out


def _popups(d: Any) -> list[PopupInfo]:
    """Mapped override-redirect windows that show on screen (toolkits and window managers keep
    1x1 helper windows mapped off screen, at -100,-100)."""
    out = []
    screen = d.screen()
    for w in screen.root.query_tree().children:
        try:
            attrs = w.get_attributes()
            if not attrs.override_redirect or attrs.map_state != X.IsViewable:
                continue
            geo = w.get_geometry()
        except error.XError:  # a window that closed while we looked
            continue
        if (geo.x + geo.width <= 0 or geo.y + geo.height <= 0
                or geo.x >= screen.width_in_pixels or geo.y >= screen.height_in_pixels):
            continue
        out.append(PopupInfo(id=int(w.id), x=int(geo.x), y=int(geo.y), width=int(geo.width),
                             height=int(geo.height)))
    return out


def _window_info(d: Any, w: Any) -> WindowInfo:
    net_name = w.get_full_property(d.intern_atom("_NET_WM_NAME"), d.intern_atom("UTF8_STRING"))
    if net_name is not None:
        raw = net_name.value
        title = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    else:
        name = w.get_wm_name()
        title = name.decode("latin-1") if isinstance(name, bytes) else (name or "")
    pid_prop = w.get_full_property(d.intern_atom("_NET_WM_PID"), X.AnyPropertyType)
    geo = w.get_geometry()
    pos = w.translate_coords(d.screen().root, 0, 0)
    return WindowInfo(
        id=int(w.id), title=title, wm_class=list(w.get_wm_class() or []),
        pid=int(pid_prop.value[0]) if pid_prop is not None and len(pid_prop.value) else None,
        x=-int(pos.x), y=-int(pos.y), width=int(geo.width), height=int(geo.height))
