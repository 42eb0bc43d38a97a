"""Grounding accuracy and latency of the ``ocr`` executor backend on the real applications.

A local slot (real Xvfb, window manager, guest agent) opens KAlgebra, TeXstudio and GRASS GIS
through the setup of the ScienceBoard tasks the demo plays (KAlgebra C-01, TeXstudio C-02,
GRASS A-03); for each application the screen is taken as set up
and with each of its first menu-bar menus open (a click at the menu's AT-SPI centre). The
targets are the AT-SPI elements on that screen (``/accessibility``: push buttons, menus, menu
items, tabs, check and radio boxes, labels) that are showing, named with letters, at most 40
characters, inside the screen, and whose name is unique among the screen's targets; their
AT-SPI box is the truth. Each target is asked for twice, the way a planner writes it:

* ``quoted``: ``I click the 'NAME' <kind>.``
* ``plain``: ``I click NAME.``

through the backend as the executor service calls it (the executor's messages, the UI-TARS
answer parsed by the production parser into screen pixels). A hit is a click whose point falls
inside the target's box (``tolerance_px`` around it, 0 by default).

* ``accuracy_quoted`` / ``accuracy_plain`` (overall and per application) over the targets that
  show text (``text_targets``); ``icon_accuracy_quoted`` over toolbar-like buttons (about
  square, at most 48 px high: their AT-SPI name is a tooltip, no text on the screen, outside
  what OCR grounding can do) and ``all_accuracy_quoted`` over both;
* ``latency_ms_first``: a call on a new screenshot (decode + one OCR pass + grounding), median
  and each; ``latency_ms_cached``: a further plan on the same screenshot (the G plans of a group);
* ``misses``: each miss on a text target with its plan, box and point, to read.

    python -m benchmarks.grounding --out benchmarks/results/grounding.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import re
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.celestia import with_env
from benchmarks.common import configure_bench_logging, loadavg, machine, median, write_result
from coda.actions import Click, Press
from coda.inference.base import GenerateOptions
from coda.inference.ocr_executor import OcrExecutorBackend, RapidOcrEngine
from coda.logging import get_logger
from coda.prompts.executor import build_executor_messages, prefill
from coda.tasks import load_task_file
from coda.uitars import ActionParseError, parse_uitars
from worker.providers.base import Desktop
from worker.providers.local import LocalProvider
from worker.tasks import TaskContext, run_setup

log = get_logger("benchmarks.grounding")

VM = Path(__file__).resolve().parents[1] / "examples" / "scienceboard" / "VM"
APPS = {"kalgebra": VM / "KAlgebra" / "C-01.json", "texstudio": VM / "TeXstudio" / "C-02.json",
        "grass": VM / "GrassGIS" / "A-03.json"}
ST = "{https://accessibility.ubuntu.example.org/ns/state}"
CP = "{https://accessibility.ubuntu.example.org/ns/component}"
ROLES = {"push-button": "button", "menu": "menu", "menu-item": "menu item",
         "page-tab": "tab", "check-box": "check box", "radio-button": "radio button",
         "label": "label", "toggle-button": "button", "check-menu-item": "menu item",
         "radio-menu-item": "menu item"}
A11Y_ENV = "QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1 QT_ACCESSIBILITY=1"
OPTIONS = GenerateOptions(continue_final_message=True, temperature=0.0)

Box = tuple[int, int, int, int]


def _pair(text: str | None) -> tuple[int, int] | None:
    nums = re.findall(r"-?\d+", text or "")
    return (int(nums[0]), int(nums[1])) if len(nums) == 2 else None


def _box(el: ET.Element) -> Box | None:
    at, size = _pair(el.get(f"{CP}screencoord")), _pair(el.get(f"{CP}size"))
    if at is None or size is None or size[0] < 4 or size[1] < 4:
        return None
    return at[0], at[1], at[0] + size[0], at[1] + size[1]


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def menubar(xml: str) -> list[str]:
    """The names of the first menu bar's entries."""
    for el in ET.fromstring(xml).iter():
        if el.tag.split("}")[-1] == "menu-bar":
            return [n for child in el if (n := (child.get("name") or "").strip())]
    return []


def is_icon(target: dict[str, Any]) -> bool:
    """A toolbar-like button or box that cannot show its name (a tooltip): about square and at
    most 48 px high, or narrower than 4 px a character of its name."""
    x0, y0, x1, y1 = target["box"]
    square = (target["role"] not in ("menu", "menu-item", "label", "page-tab")
              and y1 - y0 <= 48 and x1 - x0 <= 1.3 * (y1 - y0))
    return square or x1 - x0 < 4 * len(target["name"])


def targets(xml: str, screen: tuple[int, int], opened: str | None = None
            ) -> list[dict[str, Any]]:
    """The screen's named, showing, unique AT-SPI elements of :data:`ROLES` with their boxes,
    inside the active window (others may lie under it) and not under the menu ``opened``."""
    root = ET.fromstring(xml)
    frames = [el for el in root.iter() if el.tag.split("}")[-1] in ("frame", "dialog", "window")
              and el.get(f"{ST}active") == "true"]
    scope = frames or [root]
    popups = [b for el in root.iter() if el.tag.split("}")[-1] in ("menu", "menu-item")
              and opened is not None and (el.get("name") or "").strip() == opened
              for child in el.iter() if child is not el
              and child.get(f"{ST}showing") == "true" and (b := _box(child)) is not None]
    popup = (min(b[0] for b in popups), min(b[1] for b in popups),
             max(b[2] for b in popups), max(b[3] for b in popups)) if popups else None
    found: list[dict[str, Any]] = []
    for top in scope:
        for el in top.iter():
            role = el.tag.split("}")[-1]
            name = (el.get("name") or "").strip()
            if role not in ROLES or not name or len(name) > 40:
                continue
            if not re.search(r"[A-Za-z]", name):
                continue
            if el.get(f"{ST}showing") != "true" or el.get(f"{ST}visible") != "true":
                continue
            box = _box(el)
            if box is None or box[0] < 0 or box[1] < 0 or box[2] > screen[0] or box[3] > screen[1]:
                continue
            if popup is not None and _overlaps(box, popup) and not (
                    popup[0] <= box[0] and box[2] <= popup[2]
                    and popup[1] <= box[1] and box[3] <= popup[3] and role.endswith("menu-item")):
                continue
            found.append({"name": name, "role": role, "box": box})
    counts: dict[str, int] = {}
    for t in found:
        key = t["name"].casefold()
        counts[key] = counts.get(key, 0) + 1
    return [t for t in found if counts[t["name"].casefold()] == 1]


def plans(target: dict[str, Any]) -> dict[str, str]:
    return {"quoted": f"I click the '{target['name']}' {ROLES[target['role']]}.",
            "plain": f"I click {target['name']}."}


def inside(point: tuple[int, int], box: Box, tol: int) -> bool:
    return box[0] - tol <= point[0] <= box[2] + tol and box[1] - tol <= point[1] <= box[3] + tol


async def ground(backend: OcrExecutorBackend, url: str, plan: str,
                 screen: tuple[int, int]) -> tuple[Any, str, float]:
    """(parsed action or None, raw answer, ms) through the executor's messages and parser."""
    messages = build_executor_messages("Use the application.", [], url, plan)
    start = time.perf_counter()
    (completion,) = await backend.chat(messages, OPTIONS)
    ms = (time.perf_counter() - start) * 1000
    try:
        parsed = parse_uitars(prefill(plan) + completion.text, *screen)
    except ActionParseError:
        try:
            parsed = parse_uitars(completion.text, *screen)
        except ActionParseError:
            return None, completion.text, ms
    return parsed.action, completion.text, ms


def open_app(desktop: Desktop, app: str, timeout_s: float) -> None:
    """``app`` on a freshly reset slot, its AT-SPI tree on the agent's bus: KAlgebra and
    TeXstudio with Qt's accessibility switched on (KAlgebra's task adapter puts it on a bus of
    its own, so it is started directly here), GRASS by its task's setup."""
    desktop.reset()
    guest = desktop.guest
    assert guest is not None
    if app == "kalgebra":
        guest.launch(f"env {A11Y_ENV} kalgebra", shell=True)
    else:
        task = load_task_file(APPS[app])
        if app == "texstudio":
            task = with_env(task, A11Y_ENV)
        report = run_setup(TaskContext.for_desktop(desktop, task))
        if not report.ok:
            raise RuntimeError(f"{app}: setup failed: {report.first_problem}")
    screen = guest.screen_size()
    deadline = time.monotonic() + timeout_s
    while not targets(guest.request("GET", "/accessibility", timeout=120).json()["AT"], screen):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{app}: no AT-SPI targets within {timeout_s:g} s")
        time.sleep(1.0)


Shot = tuple[str, str | None, bytes, str]
"""(state, the menu opened or None, png, AT-SPI xml)."""


def screens(desktop: Desktop, menus: int, settle_s: float) -> list[Shot]:
    """(state, png, AT-SPI xml) for the app as set up and with each of its first menus open."""
    guest = desktop.guest
    assert guest is not None
    out = []

    def take(state: str, opened: str | None) -> str:
        time.sleep(settle_s)  # the repaint after a click has no event to wait on here
        png = guest.screenshot(fmt="png")
        xml = guest.request("GET", "/accessibility", timeout=120).json()["AT"]
        out.append((state, opened, png, xml))
        return xml

    xml = take("start", None)
    screen = guest.screen_size()
    names = menubar(xml)
    bar = [t for t in targets(xml, screen) if t["name"] in names][:menus]
    for menu in bar:
        x0, y0, x1, y1 = menu["box"]
        desktop.act(Click(x=(x0 + x1) // 2, y=(y0 + y1) // 2))
        take(f"menu {menu['name']}", menu["name"])
        desktop.act(Press(key="escape"))  # closed again before the next one
        desktop.act(Press(key="escape"))
    return out


def _share(hit: int, n: int) -> float | None:
    return round(hit / n, 3) if n else None


def _summary(counts: dict[str, int]) -> dict[str, Any]:
    return {"targets": counts["text"] + counts["icon"], "text_targets": counts["text"],
            "icon_targets": counts["icon"],
            "accuracy_quoted": _share(counts["text:quoted"], counts["text"]),
            "accuracy_plain": _share(counts["text:plain"], counts["text"]),
            "icon_accuracy_quoted": _share(counts["icon:quoted"], counts["icon"]),
            "all_accuracy_quoted": _share(counts["text:quoted"] + counts["icon:quoted"],
                                          counts["text"] + counts["icon"])}


async def measure(shots: dict[str, list[Shot]], screen: tuple[int, int],
                  tol: int) -> dict[str, Any]:
    backend = OcrExecutorBackend(RapidOcrEngine())
    per_app: dict[str, dict[str, Any]] = {}
    first_ms: list[float] = []
    cached_ms: list[float] = []
    misses: list[dict[str, Any]] = []
    total: dict[str, int] = dict.fromkeys(
        ("text", "icon", "text:quoted", "text:plain", "icon:quoted", "icon:plain"), 0)
    for app, states in shots.items():
        counts = dict.fromkeys(total, 0)
        for state, opened, png, xml in states:
            url = "data:image/png;base64," + base64.b64encode(png).decode()
            wanted = targets(xml, screen, opened)
            first = True
            for target in wanted:
                kind = "icon" if is_icon(target) else "text"
                counts[kind] += 1
                for style, plan in plans(target).items():
                    action, raw, ms = await ground(backend, url, plan, screen)
                    (first_ms if first else cached_ms).append(ms)
                    first = False
                    point = (action.x, action.y) if isinstance(action, Click) else None
                    if point is not None and inside(point, target["box"], tol):
                        counts[f"{kind}:{style}"] += 1
                    elif kind == "text":
                        misses.append({"app": app, "state": state, "style": style,
                                       "plan": plan, "box": target["box"], "point": point,
                                       "raw": raw[:200]})
            log.info("grounding.state", app=app, state=state, targets=len(wanted))
        per_app[app] = {**_summary(counts), "screens": len(states)}
        for k in total:
            total[k] += counts[k]
    await backend.aclose()
    return {
        **_summary(total),
        "per_app": per_app,
        "latency_ms_first": {"median": median(first_ms, 1), "each": [round(v) for v in first_ms]},
        "latency_ms_cached": {"median": median(cached_ms, 2), "calls": len(cached_ms)},
        "ocr_passes": backend.ocr_passes,
        "model_files": backend.model_files(),
        "model_files_unchanged": backend.check_model_files(),
        "misses": misses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/grounding.json"))
    parser.add_argument("--apps", default=",".join(APPS))
    parser.add_argument("--menus", type=int, default=3, help="menus opened per application")
    parser.add_argument("--settle-s", type=float, default=1.5)
    parser.add_argument("--tolerance-px", type=int, default=0)
    parser.add_argument("--ready-timeout-s", type=float, default=120.0)
    parser.add_argument("--shots-dir", type=Path, default=None,
                        help="also write each screenshot and its AT-SPI tree there")
    args = parser.parse_args()
    configure_bench_logging()
    before = loadavg()
    shots: dict[str, list[Shot]] = {}
    with LocalProvider() as provider:
        desktop = provider.desktop(0)
        for app in args.apps.split(","):
            open_app(desktop, app, args.ready_timeout_s)
            shots[app] = screens(desktop, args.menus, args.settle_s)
        assert desktop.guest is not None
        screen = desktop.guest.screen_size()
    if args.shots_dir is not None:
        args.shots_dir.mkdir(parents=True, exist_ok=True)
        for app, states in shots.items():
            for i, (_, _, png, xml) in enumerate(states):
                (args.shots_dir / f"{app}-{i}.png").write_bytes(png)
                (args.shots_dir / f"{app}-{i}.xml").write_text(xml)
    result = asyncio.run(measure(shots, screen, args.tolerance_px))
    doc = {"benchmark": "grounding", "at": datetime.now(UTC).isoformat(timespec="seconds"),
           "backend": "ocr (rapidocr-onnxruntime 1.4.4, PP-OCRv4)", "screen": list(screen),
           "tolerance_px": args.tolerance_px, "machine": machine(before), **result}
    write_result(args.out, doc)
    log.info("grounding.result", **{k: v for k, v in doc.items()
                                    if k not in ("misses", "machine", "model_files")})


if __name__ == "__main__":
    main()
