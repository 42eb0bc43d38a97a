"""KAlgebra through its accessibility tree (AT-SPI), as a child program of the guest.

Runs in the guest's system Python (``python3-gi`` + ``gir1.2-atspi-2.0``; the worker's
virtualenv need not have them) with the session bus KAlgebra was started on, and prints one
JSON object. Debian's KAlgebra (Qt 5) publishes, with ``QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1``:

* the main tab list (``page tab list`` with Calculator / 2D Graph / 3D Graph / Dictionary);
* the dock ``Variables`` (a tree of name / value cells: the calculator's variables);
* the dock ``Functions`` (a tree of name / plot cells: every 2D plot, hidden ones too), with its
  own tabs List / Add / Variables / Viewport; the Add page has the function editor and OK;
* the menus ``2D Graph`` (resolution: Poor, Normal, Fine, Very Fine; one checked) and
  ``3D Graph`` (style: Dots, Lines, Solid; one checked);
* the 3D page's expression editor and its view (screen box), the status bar.

``python3 atspi_kalgebra.py COMMAND [ARG]`` with COMMAND one of ``state``, ``tab INDEX``,
``add2d EXPR``, ``add3d EXPR``, ``menu MENU ITEM``, ``colours`` (the 2D Graph tab and the
Functions list shown, the screen boxes of the 2D view and of each list row), ``editor`` (whether
the Functions panel shows a function's editor), ``focus`` (what has the keyboard focus in
that panel: both for a test that drives KAlgebra with keys to wait on), ``parts VARIABLE``
(the variable's real and imaginary parts, which the Calculator's console calculates into two
new variables: the Variables panel shows a number's real part only). Every command waits on
the tree (never a fixed delay) up to ``CODA_KALGEBRA_TIMEOUT_S`` (20) seconds and exits 0
with ``{"ok": true, ...}`` or 2 with ``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any

TAB_NAMES = ("Calculator", "2D Graph", "3D Graph", "Dictionary")
RESOLUTIONS = ("Poor", "Normal", "Fine", "Very Fine")
STYLES = ("Dots", "Lines", "Solid")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TIMEOUT_S = float(os.environ.get("CODA_KALGEBRA_TIMEOUT_S", "20"))


class Failure(RuntimeError):
    pass


def _atspi() -> Any:  # pragma: no cover - needs the guest's system Python
    import gi

    gi.require_version("Atspi", "2.0")
    from gi.repository import Atspi
    return Atspi


def children(acc: Any) -> list[Any]:
    out = []
    for i in range(acc.get_child_count()):
        child = acc.get_child_at_index(i)
        if child is not None:
            out.append(child)
    return out


def walk(acc: Any, depth: int = 0, max_depth: int = 40) -> Any:
    yield acc
    if depth < max_depth:
        for child in children(acc):
            yield from walk(child, depth + 1, max_depth)


def role(acc: Any) -> str:
    return str(acc.get_role_name() or "")


def name(acc: Any) -> str:
    return str(acc.get_name() or "")


def has_state(acc: Any, nick: str) -> bool:
    return any(s.value_nick == nick for s in acc.get_state_set().get_states())


def text_of(acc: Any) -> str:
    Atspi = _atspi()
    if "Text" not in acc.get_interfaces():
        return ""
    return str(Atspi.Text.get_text(acc, 0, Atspi.Text.get_character_count(acc)))


class KAlgebra:
    """The KAlgebra application in the tree."""

    def __init__(self) -> None:
        Atspi = _atspi()
        self.Atspi = Atspi
        desktop = Atspi.get_desktop(0)
        apps = [a for a in children(desktop) if name(a).lower() == "kalgebra"]
        if not apps:
            raise Failure("KAlgebra is not in the accessibility tree")
        self.app = apps[-1]
        frames = [f for f in children(self.app) if role(f) == "frame"]
        mains = [f for f in frames if any(role(c) == "menu bar" for c in children(f))]
        if not mains:
            raise Failure("KAlgebra's main window is not in the accessibility tree")
        self.main = mains[0]
        # dock widgets are frames inside the main window (floating ones: next to it)
        self.docks = {name(f): f for f in [*children(self.main), *frames]
                      if role(f) == "frame" and f is not self.main}

    # parts -----------------------------------------------------------------------------

    def tab_list(self) -> Any:
        for acc in walk(self.main, max_depth=4):
            if role(acc) == "page tab list":
                names = [name(c) for c in children(acc) if role(c) == "page tab"]
                if tuple(names[:4]) == TAB_NAMES:
                    return acc
        raise Failure("KAlgebra's tabs are not in the accessibility tree")

    def pages(self) -> list[Any]:
        """The four tab pages, in tab order (the layered pane next to the tab list)."""
        parent = self.tab_list().get_parent()
        for c in children(parent):
            if role(c) == "layered pane" and c.get_child_count() == 4:
                return children(c)
        raise Failure("KAlgebra's tab pages are not in the accessibility tree")

    def current_tab(self) -> int:
        """The tab whose page is showing (Qt marks no tab button *selected*)."""
        for i, page in enumerate(self.pages()):
            if has_state(page, "showing"):
                return i
        return -1

    def menu_checked(self, menu: str, options: tuple[str, ...]) -> str | None:
        for acc in walk(self.main, max_depth=6):
            if role(acc) == "menu item" and name(acc) == menu and acc.get_child_count():
                for item in walk(acc, max_depth=3):
                    if (role(item) in ("menu item", "radio menu item", "check menu item")
                            and name(item) in options and has_state(item, "checked")):
                        return name(item)
                return None
        return None

    def _cells(self, dock: str) -> list[list[str]]:
        frame = self.docks.get(dock)
        if frame is None:
            raise Failure(f"KAlgebra's {dock} panel is not in the accessibility tree")
        for acc in walk(frame, max_depth=8):
            if role(acc) == "tree" or (role(acc) == "table" and dock == "Variables"):
                cells = [name(c) for c in children(acc) if role(c) == "table cell"]
                return [cells[i:i + 2] for i in range(0, len(cells) - 1, 2)]
        raise Failure(f"KAlgebra's {dock} list is not in the accessibility tree")

    def box(self, acc: Any) -> list[int]:
        e = self.Atspi.Component.get_extents(acc, self.Atspi.CoordType.SCREEN)
        return [e.x, e.y, e.width, e.height]

    def function_rows(self) -> list[dict[str, Any]]:
        """Each row of the Functions list: its name and plot, the screen boxes of its two
        cells, whether it is selected."""
        frame = self.docks.get("Functions")
        tree = next((acc for acc in walk(frame, max_depth=8) if role(acc) == "tree"), None) \
            if frame is not None else None
        if tree is None:
            raise Failure("KAlgebra's Functions list is not in the accessibility tree")
        cells = [c for c in children(tree) if role(c) == "table cell"]
        return [{"name": name(a), "plot": name(b), "name_box": self.box(a),
                 "plot_box": self.box(b), "selected": has_state(a, "selected"),
                 "showing": has_state(a, "showing") and has_state(b, "showing")}
                for a, b in zip(cells[::2], cells[1::2], strict=False)]

    def variables(self) -> list[list[str]]:
        return self._cells("Variables")

    def functions(self) -> list[list[str]]:
        return self._cells("Functions")

    def editor(self, page: Any) -> Any:
        """The first multi-line expression editor (an editable text with children)."""
        for acc in walk(page, max_depth=8):
            if role(acc) == "text" and has_state(acc, "editable") and acc.get_child_count():
                return acc
        raise Failure("no expression editor found")

    def view3d(self) -> list[int]:
        """Screen box (x, y, width, height) of the 3D view: the page's largest child."""
        return self.view(2)

    def view(self, page: int) -> list[int]:
        """Screen box (x, y, width, height) of a graph page's view: its largest child (the 2D
        page, which has none, is its view)."""
        Atspi = self.Atspi
        best: list[int] = [0, 0, 0, 0]
        if not children(self.pages()[page]):
            return self.box(self.pages()[page])
        for c in children(self.pages()[page]):
            if "Component" not in c.get_interfaces() or role(c) == "text":
                continue
            e = Atspi.Component.get_extents(c, Atspi.CoordType.SCREEN)
            if e.width * e.height > best[2] * best[3]:
                best = [e.x, e.y, e.width, e.height]
        return best

    def status(self) -> str:
        for c in children(self.main):
            if role(c) == "status bar":
                labels = [name(x) for x in children(c) if role(x) == "label"]
                return labels[-1] if labels else ""
        return ""

    def functions_add_page(self) -> tuple[Any, Any]:
        """(the function editor, the OK button) of the Functions panel's Add page."""
        frame = self.docks.get("Functions")
        if frame is None:
            raise Failure("KAlgebra's Functions panel is not in the accessibility tree")
        for acc in walk(frame, max_depth=8):
            buttons = [c for c in children(acc) if role(c) == "push button" and name(c) == "OK"]
            if buttons:
                return self.editor(acc), buttons[0]
        raise Failure("the Functions panel's Add page is not in the accessibility tree")

    def functions_tabs(self) -> Any:
        frame = self.docks.get("Functions")
        for acc in walk(frame, max_depth=6) if frame is not None else ():
            if role(acc) == "page tab list" and name(acc) in ("List", "Add", "Variables"):
                return acc
        raise Failure("the Functions panel's tabs are not in the accessibility tree")

    # actions ---------------------------------------------------------------------------

    def select_tab(self, tabs: Any, index: int) -> None:
        """Press the tab button (Qt's tab buttons have one action, Press)."""
        buttons = [c for c in children(tabs) if role(c) == "page tab"]
        if index >= len(buttons):
            raise Failure(f"no tab {index}")
        button = buttons[index]
        if "Action" not in button.get_interfaces() or not self.Atspi.Action.do_action(button, 0):
            raise Failure(f"tab {index} could not be selected")

    def set_text(self, acc: Any, text: str) -> None:
        if ("EditableText" not in acc.get_interfaces()
                or not self.Atspi.EditableText.set_text_contents(acc, text)):
            raise Failure("the editor refused the text")
        wait(lambda: text_of(acc) == text, "the editor to show the text")

    def press_return(self, acc: Any) -> None:
        """Focus ``acc`` and press Return through the X server (the editors act on Return)."""
        if "Component" not in acc.get_interfaces() or not self.Atspi.Component.grab_focus(acc):
            raise Failure("the editor could not take the focus")
        wait(lambda: has_state(acc, "focused"), "the editor to take the focus")
        self.Atspi.generate_keyboard_event(0xFF0D, None, self.Atspi.KeySynthType.SYM)


def wait(check: Any, what: str, timeout: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except Failure:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def connect() -> KAlgebra:
    return wait(_try_connect, "KAlgebra in the accessibility tree")


def _try_connect() -> KAlgebra | None:
    try:
        return KAlgebra()
    except Failure:
        return None


def state(k: KAlgebra) -> dict[str, Any]:
    return {
        "tab": k.current_tab(),
        "variables": k.variables(),
        "functions": k.functions(),
        "resolution": k.menu_checked("2D Graph", RESOLUTIONS),
        "style": k.menu_checked("3D Graph", STYLES),
        "input3d": text_of(k.editor(k.pages()[2])),
        "view3d": k.view3d(),
        "status": k.status(),
    }


def cmd_tab(k: KAlgebra, index: int) -> dict[str, Any]:
    k.select_tab(k.tab_list(), index)
    wait(lambda: k.current_tab() == index, f"tab {index} to be shown")
    return {"tab": index}


def cmd_add2d(k: KAlgebra, expr: str) -> dict[str, Any]:
    before = len(k.functions())
    k.select_tab(k.functions_tabs(), 1)
    editor, ok = wait(k.functions_add_page, "the Add page")
    k.set_text(editor, expr)
    if "Action" not in ok.get_interfaces() or not k.Atspi.Action.do_action(ok, 0):
        raise Failure("the OK button did not respond")
    functions = wait(lambda: (f := k.functions()) and len(f) > before and f,
                     "the new function in the Functions list")
    return {"functions": functions}


def cmd_add3d(k: KAlgebra, expr: str) -> dict[str, Any]:
    if k.current_tab() != 2:
        cmd_tab(k, 2)
    editor = k.editor(k.pages()[2])
    k.set_text(editor, expr)
    k.press_return(editor)
    return {"input3d": text_of(editor), "status": k.status()}


def cmd_parts(k: KAlgebra, variable: str) -> dict[str, Any]:
    """The variable's real and imaginary parts as the Variables panel shows them, calculated by
    KAlgebra's own console (``real``, ``imaginary``) into two variables named after no other."""
    if IDENTIFIER.fullmatch(variable) is None:
        raise Failure(f"{variable!r} is not a variable name")
    known = dict(k.variables())
    if variable not in known:
        raise Failure(f"variable {variable} is not defined")
    n = 0
    while f"coda_re{n}" in known or f"coda_im{n}" in known:
        n += 1
    if k.current_tab() != 0:
        cmd_tab(k, 0)
    console = k.editor(k.pages()[0])
    parts = []
    for target, function in ((f"coda_re{n}", "real"), (f"coda_im{n}", "imaginary")):
        k.set_text(console, f"{target}:={function}({variable})")
        k.press_return(console)
        parts.append(wait(lambda t=target: dict(k.variables()).get(t),
                          f"{target} in the Variables panel"))
    return {"parts": parts}


def cmd_colours(k: KAlgebra) -> dict[str, Any]:
    """Show the 2D Graph tab and the Functions panel's list (a plot's colour is drawn there and
    in the 2D view), then the screen boxes to read: the view and every row of the list."""
    if k.current_tab() != 1:
        cmd_tab(k, 1)
    k.select_tab(k.functions_tabs(), 0)
    def on_screen() -> dict[str, Any] | None:
        rows = k.function_rows()
        shown = all(r["showing"] and r["name_box"][2] * r["name_box"][3] > 0 for r in rows)
        return {"rows": rows} if shown else None

    rows = wait(on_screen, "the Functions list on the screen")["rows"]
    view = wait(lambda: (b := k.view(1))[2] * b[3] > 0 and b, "the 2D view on the screen")
    return {"rows": rows, "view": view}


def cmd_editor(k: KAlgebra) -> dict[str, Any]:
    """Whether the Functions panel shows a function's editor (its Add page, or the Editing page a
    double-click on a plot opens): its OK button is on the screen (Qt keeps the list's rows
    marked *showing* behind it)."""
    frame = k.docks.get("Functions")
    if frame is None:
        raise Failure("KAlgebra's Functions panel is not in the accessibility tree")
    shown = any(role(acc) == "push button" and name(acc) == "OK" and has_state(acc, "showing")
                for acc in walk(frame, max_depth=8))
    return {"editor": shown}


def cmd_focus(k: KAlgebra) -> dict[str, Any]:
    """What has the keyboard focus in the Functions panel: each shown, focusable accessible in
    the focused state (Qt leaves the mark on a list's cells after the focus moved on), its role
    and its index among its parent's children (a combo box's list items are its children)."""
    frame = k.docks.get("Functions")
    if frame is None:
        raise Failure("KAlgebra's Functions panel is not in the accessibility tree")
    return {"focus": [{"role": role(acc), "index": acc.get_index_in_parent()}
                      for acc in walk(frame, max_depth=12)
                      if all(has_state(acc, s) for s in ("focused", "focusable", "showing"))]}


def _menu_entry(k: KAlgebra, menu: str, item: str) -> Any:
    for acc in walk(k.main, max_depth=6):
        if role(acc) == "menu item" and name(acc) == menu and acc.get_child_count():
            for entry in walk(acc, max_depth=3):
                if role(entry).endswith("menu item") and name(entry) == item:
                    return entry
    raise Failure(f"no menu item {menu} > {item}")


def cmd_menu(k: KAlgebra, menu: str, item: str) -> dict[str, Any]:
    """Trigger the (enabled: a tab's menu works on its own tab) item ``item`` of ``menu``."""
    entry = _menu_entry(k, menu, item)
    if not has_state(entry, "enabled"):
        raise Failure(f"menu item {menu} > {item} is disabled (show its tab first)")
    if not k.Atspi.Action.do_action(entry, 0):
        raise Failure(f"menu item {item!r} did not respond")
    if has_state(entry, "checkable"):
        wait(lambda: has_state(entry, "checked"), f"menu item {item!r} to be checked")
    return {"menu": [menu, item]}


def main(argv: list[str]) -> int:  # pragma: no cover - runs in the guest's system Python
    try:
        k = connect()
        command = argv[0] if argv else "state"
        if command == "state":
            out = state(k)
        elif command == "tab":
            out = cmd_tab(k, int(argv[1]))
        elif command == "add2d":
            out = cmd_add2d(k, argv[1])
        elif command == "add3d":
            out = cmd_add3d(k, argv[1])
        elif command == "menu":
            out = cmd_menu(k, argv[1], argv[2])
        elif command == "colours":
            out = cmd_colours(k)
        elif command == "focus":
            out = cmd_focus(k)
        elif command == "editor":
            out = cmd_editor(k)
        elif command == "parts":
            out = cmd_parts(k, argv[1])
        else:
            raise Failure(f"unknown command {command!r}")
    except Failure as exc:
        sys.stdout.write(json.dumps({"ok": False, "error": str(exc)}))
        return 2
    sys.stdout.write(json.dumps({"ok": True, **out}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
