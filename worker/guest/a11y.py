"""``/accessibility``: the AT-SPI tree as OSWorld's XML, in a child process with a time bound.

OSWorld's server walks the tree in its own process: with no AT-SPI bus the whole server
aborts, and on a busy desktop a walk can take hours. Here the walk runs in the system Python
(which has GObject introspection's ``Atspi``; the agent's virtualenv need not) and is killed
when it passes its bound. Tags are role names; attributes use OSWorld's Ubuntu namespaces so
their linearisers read it unchanged.

``python3 a11y.py MAX_DEPTH MAX_NODES`` prints the XML (this file is the child program). A
node whose geometry AT-SPI cannot give keeps its other attributes; the child says on stderr
how many, and the agent logs it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

SYSTEM_PYTHON = "/usr/bin/python3"
NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
}


class AccessibilityError(RuntimeError):
    pass


class AccessibilityTimeout(RuntimeError):
    pass


def dump(*, timeout: float, env: Mapping[str, str], max_depth: int = 50,
         max_nodes: int = 5000) -> str:
    """The tree as XML text, or :class:`AccessibilityError` / :class:`AccessibilityTimeout`."""
    if not Path(SYSTEM_PYTHON).exists():
        raise AccessibilityError(f"{SYSTEM_PYTHON} not found (needs python3-gi, gir1.2-atspi-2.0)")
    try:
        done = subprocess.run([SYSTEM_PYTHON, __file__, str(max_depth), str(max_nodes)],
                              capture_output=True, text=True, timeout=timeout, env=dict(env))
    except subprocess.TimeoutExpired:
        raise AccessibilityTimeout(f"accessibility tree not read within {timeout:g} s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise AccessibilityError(f"accessibility tree unavailable: {last}")
    if done.stderr.strip():  # (imported here: the child, in the system Python, has no coda)
        from coda.logging import get_logger

        get_logger("worker.guest").info("guest.a11y_partial", detail=done.stderr.strip()[-500:])
    return done.stdout


def _child(max_depth: int, max_nodes: int) -> None:  # pragma: no cover - runs in the system Python
    import xml.etree.ElementTree as ET

    import gi

    gi.require_version("Atspi", "2.0")
    from gi.repository import Atspi, GLib

    for prefix, uri in NS.items():
        ET.register_namespace(prefix, uri)
    budget = [max_nodes]
    no_extents: list[str] = []

    def node(acc: object, depth: int) -> ET.Element:
        budget[0] -= 1
        role = (acc.get_role_name() or "unknown").replace(" ", "-")  # type: ignore[attr-defined]
        el = ET.Element(role, {"name": acc.get_name() or ""})  # type: ignore[attr-defined]
        states = acc.get_state_set().get_states()  # type: ignore[attr-defined]
        for st in states:
            el.set(f"{{{NS['st']}}}{st.value_nick.replace('-', '_')}", "true")
        try:
            ext = acc.get_extents(Atspi.CoordType.SCREEN)  # type: ignore[attr-defined]
            el.set(f"{{{NS['cp']}}}screencoord", f"({ext.x}, {ext.y})")
            el.set(f"{{{NS['cp']}}}size", f"({ext.width}, {ext.height})")
        except GLib.Error as exc:  # a defunct or geometry-less object: its node stays
            no_extents.append(f"{role}: {exc}")
        if depth < max_depth:
            for i in range(min(acc.get_child_count(), 1024)):  # type: ignore[attr-defined]
                if budget[0] <= 0:
                    break
                child = acc.get_child_at_index(i)  # type: ignore[attr-defined]
                if child is not None:
                    el.append(node(child, depth + 1))
        return el

    root = ET.Element("desktop-frame")
    desktop = Atspi.get_desktop(0)
    for i in range(desktop.get_child_count()):
        app = desktop.get_child_at_index(i)
        if app is not None and budget[0] > 0:
            root.append(node(app, 1))
    sys.stdout.write(ET.tostring(root, encoding="unicode"))
    if no_extents:
        sys.stderr.write(f"no geometry for {len(no_extents)} nodes (first: {no_extents[0]})\n")


if __name__ == "__main__":  # pragma: no cover
    _child(int(sys.argv[1]), int(sys.argv[2]))
