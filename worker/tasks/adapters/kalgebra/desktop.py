"""KAlgebra without ScienceBoard's patched build: Debian's KAlgebra driven and read through its
accessibility tree, points calculated by ``calgebra`` (the same Analitza library).

* ``launch`` starts a D-Bus session bus for the application (AT-SPI lives on it; the address
  goes to ``~/.coda/kalgebra-bus`` in the guest so every later step and checker finds it),
  uploads the tree helper (:mod:`atspi_kalgebra`) and starts KAlgebra with Qt's accessibility
  on; it returns when the main window is in the tree.
* ``tab`` presses the tab button, ``func_2d`` fills the Functions panel's Add page and presses
  OK (done when the list has one more function), ``func_3d`` types into the 3D tab's editor and
  presses Return.
* State read for the checkers: the Variables panel (name and value of every variable), the
  Functions panel (every 2D plot as the user typed it), the checked items of the 2D Graph menu
  (resolution) and 3D Graph menu (style), the 3D editor's text.
* A number variable that a ``var`` checker compares with non-number text (a complex value: the
  panel shows a number's real part only, so ``1+-i`` cannot be told from ``1``): KAlgebra's
  console calculates its real and imaginary parts into two new variables (the checker's only
  mark on the session), Analitza writes the number they make.
* A 2D plot's colour (not in the tree): read from the pixels (:mod:`.colours`) of the
  Functions list's colour squares and the 2D view, the 2D Graph tab and the list shown first.
* What the panels cannot show stays *unavailable*: the 3D surface unless re-plotting the 3D
  editor's text leaves the 3D view exactly as it was (the editor may hold text that was never
  plotted).
"""

from __future__ import annotations

import json
import shlex
import time
from decimal import Decimal
from io import BytesIO
from pathlib import Path
from typing import Any

from PIL import Image, ImageChops

from coda.contracts.desktop import CheckStatus, StepStatus
from coda.logging import get_logger
from coda.tasks import SetupStep
from worker.providers.client import GuestError
from worker.tasks.adapters.kalgebra import colours, points
from worker.tasks.context import CheckError, StepError, TaskContext, params

log = get_logger(__name__)

HELPER = Path(__file__).with_name("atspi_kalgebra.py")
GUEST_DIR = "/home/user/.coda"
BUS_FILE = f"{GUEST_DIR}/kalgebra-bus"
HELPER_PATH = f"{GUEST_DIR}/atspi_kalgebra.py"
CALC_PATH = f"{GUEST_DIR}/kalgebra-points.kal"
SYSTEM_PYTHON = "/usr/bin/python3"
PATCHED_BINARY = "/app/bin/kalgebra"
HELPER_TIMEOUT_S = 60.0
VIEW_SETTLE_S = 1.0
VIEW_TIMEOUT_S = 30.0
A11Y_ENV = "QT_LINUX_ACCESSIBILITY_ALWAYS_ON=1 QT_ACCESSIBILITY=1"
SQRT = "sqrt:=x->root(x, 2)"


class Unreadable(RuntimeError):
    pass


def wants_desktop_mode(ctx: TaskContext, command: str) -> bool:
    """The launch command starts a KAlgebra other than ScienceBoard's patched build."""
    return PATCHED_BINARY not in ctx.rw(command)


def bus_address(ctx: TaskContext) -> str | None:
    """The session bus the task's KAlgebra runs on (None: not started by this adapter)."""
    if "kalgebra_bus" not in ctx.scratch:
        data = ctx.guest.read_file(ctx.rw(BUS_FILE))
        if data is None:
            return None
        ctx.scratch["kalgebra_bus"] = data.decode().strip()
    bus: str = ctx.scratch["kalgebra_bus"]
    return bus


def helper(ctx: TaskContext, *args: str, timeout: float = HELPER_TIMEOUT_S) -> dict[str, Any]:
    bus = bus_address(ctx)
    if bus is None:
        raise Unreadable("KAlgebra was not started with its accessibility bus")
    argv = " ".join(shlex.quote(a) for a in args)
    out = ctx.guest.execute(
        f"DBUS_SESSION_BUS_ADDRESS={shlex.quote(bus)} {SYSTEM_PYTHON} "
        f"{shlex.quote(ctx.rw(HELPER_PATH))} {argv}", shell=True, timeout=timeout + 10)
    try:
        reply = json.loads(out.output)
    except ValueError:
        raise Unreadable(f"KAlgebra's accessibility helper failed: "
                         f"{out.error[-300:]}") from None
    if not reply.get("ok"):
        raise Unreadable(f"KAlgebra's accessibility tree: {reply.get('error')}")
    return dict(reply)


# setup steps ---------------------------------------------------------------------------------

def launch(ctx: TaskContext, step: SetupStep, generic: Any) -> str:
    p = params(step)
    guest_dir = ctx.rw(GUEST_DIR)
    made = ctx.guest.execute(f"mkdir -p {shlex.quote(guest_dir)} && dbus-daemon --session "
                             f"--fork --print-address=1", shell=True, timeout=30)
    bus = made.output.strip().splitlines()
    if made.returncode != 0 or not bus:
        raise StepError(StepStatus.FAILED, f"no D-Bus session bus for KAlgebra's accessibility "
                                           f"tree (dbus-daemon: {made.error[-200:]})")
    ctx.scratch["kalgebra_bus"] = bus[0]
    ctx.guest.upload(ctx.rw(BUS_FILE), bus[0].encode())
    ctx.guest.upload(ctx.rw(HELPER_PATH), HELPER.read_bytes())
    command = f"env DBUS_SESSION_BUS_ADDRESS={shlex.quote(bus[0])} {A11Y_ENV} {p['command']}"
    detail = generic(ctx, step.model_copy(update={"command": command, "shell": True}))
    try:
        helper(ctx, "state")
    except (Unreadable, GuestError) as exc:
        raise StepError(StepStatus.FAILED, f"KAlgebra started but its accessibility tree "
                                           f"cannot be read: {exc}") from exc
    log.info("kalgebra.launched", bus=bus[0])
    return f"{detail}; accessibility tree readable"


def _step(ctx: TaskContext, *args: str) -> dict[str, Any]:
    try:
        return helper(ctx, *args)
    except Unreadable as exc:
        raise StepError(StepStatus.FAILED, str(exc)) from exc


def step_tab(ctx: TaskContext, index: int) -> str:
    _step(ctx, "tab", str(index))
    return f"KAlgebra tab {index} shown"


def step_func_2d(ctx: TaskContext, expr: str) -> str:
    reply = _step(ctx, "add2d", expr)
    return f"2D plot added ({len(reply['functions'])} in the list)"


def step_func_3d(ctx: TaskContext, expr: str) -> str:
    reply = _step(ctx, "add3d", expr)
    if reply.get("input3d") != expr:
        raise StepError(StepStatus.FAILED, f"the 3D editor shows {reply.get('input3d')!r}")
    ctx.scratch["kalgebra_setup_3d"] = expr
    return "3D plot requested"


# state -----------------------------------------------------------------------------------------

def _check(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Unreadable as exc:
        raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc


def state(ctx: TaskContext) -> dict[str, Any]:
    """The application's state, read once per evaluation."""
    if "kalgebra_state" not in ctx.scratch:
        ctx.scratch["kalgebra_state"] = _check(helper, ctx, "state")
    st: dict[str, Any] = ctx.scratch["kalgebra_state"]
    return st


def variables(ctx: TaskContext) -> dict[str, str]:
    return {name: value for name, value in state(ctx)["variables"]}


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def number_text(value: float) -> str:
    """Analitza's text of a real number (12 significant digits)."""
    text = f"{value:.12g}"
    return text


def var_text(ctx: TaskContext, key: str, expected: str) -> str | None:
    """The variable's text as Analitza writes its value, None when it is not defined: a value
    the panel shows as an expression (KAlgebra keeps exact values: ``sqrt(1)-i``) is
    calculated by Analitza first (``1+-i``), as the application's value is meant."""
    shown = variables(ctx).get(key)
    if shown is None:
        return None
    if not is_number(shown):
        result = calculated(ctx, shown)
        return shown if result.startswith("Error:") else result
    if not is_number(expected):
        return complex_text(ctx, key)
    return number_text(float(shown))


def complex_text(ctx: TaskContext, key: str) -> str:
    """Analitza's text of a number variable whose imaginary part matters (the Variables panel
    shows a number's real part only): KAlgebra's console calculates its real and imaginary
    parts into two new variables, which the panel shows, and Analitza writes the number they
    make (``1+-i``). The state the other checkers read was taken before."""
    state(ctx)
    real, imaginary = _check(helper, ctx, "parts", key)["parts"]
    if not (is_number(real) and is_number(imaginary)):
        raise CheckError(CheckStatus.UNAVAILABLE, f"{key}'s parts are not numbers: "
                                                  f"{real!r}, {imaginary!r}")
    return calculated(ctx, f"{positional(real)}+({positional(imaginary)})*i")


def positional(number: str) -> str:
    """A number's text without an exponent (the panel may write ``1e-05``; Analitza reads
    digits and a point)."""
    return format(Decimal(number), "f")


def calculated(ctx: TaskContext, text: str) -> str:
    """Analitza's result text of an expression the Variables panel shows (KAlgebra keeps values
    exact where it can: ``-sqrt(3)+2.88449914061``), through ``calgebra`` in the guest; an
    error is ``Error:`` and its reasons."""
    lines = [SQRT, text]  # the panel writes Analitza's root(x, 2) as sqrt(x)
    return _session(ctx, lines)[-1]


def value_of(ctx: TaskContext, text: str) -> float:
    """The number Analitza calculates from a value the Variables panel shows as an expression;
    ValueError when it is not a real number."""
    return float(calculated(ctx, text))


def _session(ctx: TaskContext, lines: list[str]) -> list[str]:
    """Analitza's result text for each line, in one ``calgebra`` session in the guest."""
    path = ctx.rw(CALC_PATH)
    ctx.guest.upload(path, ("\n".join(lines) + "\n").encode())
    out = ctx.guest.execute(f"calgebra --calculate < {shlex.quote(path)}", shell=True,
                            timeout=120)
    if out.returncode not in (0, None):
        raise CheckError(CheckStatus.UNAVAILABLE, f"calgebra failed: {out.error}")
    return parse_session(out.error, lines)


def calculate(ctx: TaskContext, blocks: list[tuple[str, list[str]]]) -> list[list[str]]:
    """Analitza's results (text) of ``calls`` with ``f`` bound to each block's definition and
    the calculator's variables defined, through ``calgebra`` in the guest (``sqrt`` defined
    first: the panels write Analitza's root(x, 2) as sqrt(x), which calgebra does not know)."""
    lines = [SQRT] + [f"{name}:={value}" for name, value in variables(ctx).items()
                      if name not in points.UNASSIGNABLE]
    for definition, calls in blocks:
        lines.append(f"f:={definition}")
        lines.extend(calls)
    results = _session(ctx, lines)
    answers: list[list[str]] = []
    index = len(lines) - sum(1 + len(c) for _, c in blocks)
    for _, calls in blocks:
        index += 1
        answers.append(results[index:index + len(calls)])
        index += len(calls)
    return answers


def parse_session(output: str, lines: list[str]) -> list[str]:
    """One result text per input line of a ``calgebra`` session, from its standard error (where
    it writes results; the prompts go to standard output): a result is one line, an error is
    ``Error:`` followed by `` - reason`` lines; the session ends with ``Exit.``."""
    results: list[str] = []
    for row in output.splitlines():
        if row.startswith(" - ") and results:
            results[-1] += "\n" + row
        elif row.strip() and row.strip() != "Exit.":
            results.append(row.strip())
    if len(results) != len(lines):
        raise CheckError(CheckStatus.UNAVAILABLE,
                         f"calgebra answered {len(results)} results for {len(lines)} lines")
    return results


def plots_2d(ctx: TaskContext, pts: list[list[Any]],
             wanted: dict[str, Any]) -> list[dict[str, Any]]:
    st = state(ctx)
    blocks, plots = [], []
    for _, display in st["functions"]:
        try:
            definition, queries = points.queries_2d(points.plot_expression(display, 2), pts)
        except points.Unreadable as exc:
            raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc
        blocks.append((definition, [q.call for q in queries]))
        plots.append((display, queries))
    results = calculate(ctx, blocks) if pts and blocks else [[] for _ in blocks]
    displays = [display for _, display in st["functions"]]
    shades = plot_colours(ctx, displays) if "color" in wanted and displays else []
    out = []
    for i, ((display, queries), texts) in enumerate(zip(plots, results, strict=True)):
        answer = points.answers(queries, texts)
        answer.update(expr=display, res=points.RESOLUTIONS.get(st.get("resolution") or "", 0))
        if shades:
            answer["color"] = shades[i]
        out.append(answer)
    return out


def _view(ctx: TaskContext, box: list[int]) -> Image.Image:
    """The 3D view once it has not changed for ``VIEW_SETTLE_S`` (its lower edge left out:
    the editor's tooltip can cover it)."""
    x, y, w, h = box
    area = (x, y, x + w, y + int(h * 0.85))
    return _settled(ctx, area, "the 3D view").crop(area)


def _screen(ctx: TaskContext) -> Image.Image:
    return Image.open(BytesIO(ctx.guest.screenshot())).convert("RGB")


def _settled(ctx: TaskContext, area: tuple[int, int, int, int], what: str) -> Image.Image:
    """The screen once ``area`` (left, top, right, bottom) has not changed for
    ``VIEW_SETTLE_S``."""
    deadline = time.monotonic() + VIEW_TIMEOUT_S
    last = _screen(ctx)
    since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = _screen(ctx)
        if ImageChops.difference(now.crop(area), last.crop(area)).getbbox() is not None:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= VIEW_SETTLE_S:
            return now
    raise CheckError(CheckStatus.UNAVAILABLE, f"{what} kept changing")


def plot_colours(ctx: TaskContext, displays: list[str]) -> list[str]:
    """Each 2D plot's colour (``#rrggbb``), in the Functions list's order, read from KAlgebra's
    pixels (:mod:`.colours`): the 2D Graph tab and the Functions list are shown first."""
    shown = _check(helper, ctx, "colours")
    rows, view = shown["rows"], shown["view"]
    if [r["plot"] for r in rows] != displays:
        raise CheckError(CheckStatus.UNAVAILABLE, "the Functions list changed while it was read")
    boxes = [view] + [r["name_box"] for r in rows] + [r["plot_box"] for r in rows]
    area = (min(b[0] for b in boxes), min(b[1] for b in boxes),
            max(b[0] + b[2] for b in boxes), max(b[1] + b[3] for b in boxes))
    image = _settled(ctx, area, "the 2D view and the Functions list")
    try:
        return [colours.hex_colour(colours.plot_colour(image, r["name_box"], r["plot_box"],
                                                       r["selected"], view)) for r in rows]
    except colours.Unreadable as exc:
        raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc


def surface(ctx: TaskContext) -> str:
    """The plotted 3D surface's text, proven by re-plotting the editor's text."""
    if "kalgebra_surface" in ctx.scratch:
        text: str = ctx.scratch["kalgebra_surface"]
        return text
    st = state(ctx)
    typed = str(st.get("input3d") or "")
    if not typed:
        raise CheckError(CheckStatus.UNAVAILABLE, "the 3D editor is empty: which surface is "
                                                  "plotted cannot be read")
    _check(helper, ctx, "tab", "2")
    box = _check(helper, ctx, "state")["view3d"]
    if box[2] * box[3] == 0:
        raise CheckError(CheckStatus.UNAVAILABLE, "the 3D view is not on the screen")
    before = _view(ctx, box)
    _check(helper, ctx, "add3d", typed)
    after = _view(ctx, box)
    if ImageChops.difference(before, after).getbbox() is not None:
        raise CheckError(CheckStatus.UNAVAILABLE, "the 3D view changed when the 3D editor's "
                                                  "text was plotted: the plotted surface is "
                                                  "not the editor's text")
    ctx.scratch["kalgebra_surface"] = typed
    return typed


def plot_3d(ctx: TaskContext, pts: list[list[Any]]) -> dict[str, Any]:
    st = state(ctx)
    display = surface(ctx)
    try:
        definition, queries = points.queries_3d(points.plot_expression(display, 3), pts)
    except points.Unreadable as exc:
        raise CheckError(CheckStatus.UNAVAILABLE, str(exc)) from exc
    texts = calculate(ctx, [(definition, [q.call for q in queries])])[0] if pts else []
    answer = points.answers(queries, texts)
    answer.update(expr=display, style=points.STYLES.get(st.get("style") or "", 0))
    return answer
