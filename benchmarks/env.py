"""Desktop environment figures on the local provider (real Xvfb, window manager, guest agent).

* ``reset_ready_s``: median of ``--resets`` resets of a slot that an "episode" left with an
  xterm open and a file written (reset = close the slot's applications, restore the home
  template, probe ready: agent answers, display up, screenshot not blank; the first observation
  is included);
* ``screenshot_ms_*``: a screenshot through the agent over HTTP as the worker takes it
  (``GET /screenshot``), median of ``--shots``, at 1280x800 (PNG, WebP) and 1920x1080 (PNG),
  with TeXstudio open on a bundled ScienceBoard document (what an episode looks at);
* ``osworld_screenshot_ms_1280x800_png``: the same screenshot on the same display taken the way
  OSWorld's server (``desktop_env/server/main.py``, shipped by ScienceBoard) does it: PIL's
  ``ImageGrab.grab()`` over a new XCB connection (what pyautogui/pyscreeze call on their GNOME
  image), the cursor read through XFixes on a new Xlib display (their ``pyxcursor``), pasted at
  ``pyautogui.position()``, saved as PNG with Pillow's defaults to one file, read back as Flask's
  ``send_file`` does. Measured in this process, without HTTP: a lower bound for their route;
* ``screenshot_speedup_vs_osworld``: that figure over ours (ours includes HTTP, theirs does
  not, and each runs as deployed: the agent tunes its allocator, their server does not);
* ``action_roundtrip_ms``: a click sent to the agent (``POST /coda/act``) until it answers;
  ``osworld_action_roundtrip_ms``: the same click the way OSWorld's client sends it
  (``/execute`` of ``python -c "import pyautogui; ..."``);
* ``step_overhead_ms`` (one slot, ``--episodes / 2`` episodes: the worker's own time per step,
  nothing else competing) and ``episodes_per_min`` (``--episodes`` episodes on ``--slots`` slots,
  with ``step_overhead_ms_<slots>_slots`` beside it): whole TeXstudio episodes through
  ``coda worker`` with the model services on the replay backend, see
  :mod:`benchmarks.episodes` (``--episodes 0`` skips them).

With ``--docker`` the same run measures the ``docker`` provider's desktop containers (image
``coda-desktop:latest``, ``bash scripts/docker-build.sh desktop``) beside the local slots:

* ``docker_first_start_s``: a container from nothing to ready (run, Xvfb, window manager,
  agent, the shared readiness probe);
* ``docker_reset_ready_s``: median of ``--resets`` resets after the same "episode", for both
  resets side by side: ``revert`` (the agent closes the applications, ``docker exec``
  restores the home and the temporary directories, ready probe) and ``recreate`` (remove the
  container, run a new one, ready probe);
* ``docker_screenshot_ms_1280x800_png``: the agent's screenshot over HTTP through the port
  published on the host's loopback, TeXstudio open on the same document, median of ``--shots``;
* ``docker_memory_mib_per_slot``: a slot container's memory as ``docker stats`` counts it
  (usage less inactive file cache), idle and with TeXstudio open on the document;
  ``docker_cpu_percent_idle_slot``: its CPU use, idle;
* ``docker_start_<slots>_slots_s``: ``--slots`` containers started at once to ready (what a
  worker's first episodes wait for; ``start_<slots>_slots_s`` the same for local slots), with
  their memory together;
* ``docker_episodes_per_min``: the episodes of ``episodes_per_min`` (same task, models, count
  and slots) with the worker's slots in desktop containers. The fleets run local, docker,
  docker, local (so load that drifts during the run weighs on both alike); both figures are
  then the means of their two runs (``*_runs`` lists them, ``episodes*`` count both runs) and
  ``docker_vs_local_episodes_per_min`` is their ratio.

Ours and theirs alternate, so load from other processes hits both alike.

    python -m benchmarks.env --docker --out benchmarks/results/env.json
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import io
import json
import os
import platform
import secrets
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from PIL import Image, ImageGrab

from coda.actions import Click
from coda.logging import configure_logging, get_logger
from worker.providers.base import Desktop
from worker.providers.client import OSWORLD_PREFIX
from worker.providers.local import LocalDesktop, LocalProvider, LocalSettings

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "env.json"
log = get_logger("benchmarks.env")


class _XFixesCursorImage(ctypes.Structure):
    _fields_ = [("x", ctypes.c_short), ("y", ctypes.c_short), ("width", ctypes.c_ushort),
                ("height", ctypes.c_ushort), ("xhot", ctypes.c_ushort),
                ("yhot", ctypes.c_ushort), ("cursor_serial", ctypes.c_ulong),
                ("pixels", ctypes.POINTER(ctypes.c_ulong)), ("atom", ctypes.c_ulong),
                ("name", ctypes.c_char_p)]


class OSWorldScreenshot:
    """OSWorld's ``/screenshot`` method (see the module docstring), reproduced for timing."""

    def __init__(self, display: str, workdir: Path) -> None:
        self.display = display.encode()
        self.file = workdir / "screenshot.png"
        self.xlib = ctypes.cdll.LoadLibrary(ctypes.util.find_library("X11") or "libX11.so.6")
        self.xfixes = ctypes.cdll.LoadLibrary(ctypes.util.find_library("Xfixes")
                                              or "libXfixes.so.3")
        self.xlib.XOpenDisplay.restype = ctypes.c_void_p
        self.xlib.XOpenDisplay.argtypes = [ctypes.c_char_p]
        self.xlib.XCloseDisplay.argtypes = [ctypes.c_void_p]
        self.xlib.XFree.argtypes = [ctypes.c_void_p]
        self.xfixes.XFixesGetCursorImage.restype = ctypes.POINTER(_XFixesCursorImage)
        self.xfixes.XFixesGetCursorImage.argtypes = [ctypes.c_void_p]
        import pyautogui  # DISPLAY is set by now; their server imports it once

        self.pyautogui = pyautogui

    def cursor(self) -> Image.Image:
        d = self.xlib.XOpenDisplay(self.display)  # a new display per call, as pyxcursor does
        try:
            img = self.xfixes.XFixesGetCursorImage(d).contents
            n = img.width * img.height
            argb = struct.pack(f"<{n}I", *(img.pixels[i] & 0xFFFFFFFF for i in range(n)))
            cursor = Image.frombuffer("RGBA", (img.width, img.height), argb, "raw", "BGRA", 0, 1)
            self.xlib.XFree(ctypes.addressof(img))
        finally:
            self.xlib.XCloseDisplay(d)  # theirs leaks it; closing costs us, not them
        return cursor

    def __call__(self) -> bytes:
        cursor = self.cursor()
        screenshot = ImageGrab.grab()  # pyscreeze on their image: Pillow over XCB
        x, y = self.pyautogui.position()
        screenshot.paste(cursor, (x, y), cursor)
        screenshot.save(self.file)
        return self.file.read_bytes()  # send_file


def _ms(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def _open_document(desktop: Desktop, home: Path | str) -> None:
    """TeXstudio on the first bundled TeXstudio task's document, so screenshots show an app."""
    guest = desktop.guest
    assert guest is not None
    task = json.loads((ROOT / "examples/scienceboard/VM/TeXstudio/A-01.json").read_text())
    text = next(s["text"] for s in task["initialize"] if s["func"] == "touch")
    path = f"{home}/atelier/main.tex"
    guest.upload(path, text.encode())
    guest.launch(["texstudio", path])
    deadline = time.monotonic() + 60
    while not any("main.tex" in w["title"] for w in guest.windows() or []):
        if time.monotonic() > deadline:
            raise RuntimeError("TeXstudio did not open the document")
        time.sleep(0.05)


def _episode(desktop: Desktop) -> None:
    """What an episode leaves behind: an application window and a file in the home."""
    guest = desktop.guest
    assert guest is not None
    guest.execute("echo result > ~/atelier/out.txt", shell=True)
    guest.launch(["xterm"])
    deadline = time.monotonic() + 30
    while not guest.windows():
        if time.monotonic() > deadline:
            raise RuntimeError("xterm did not open")
        time.sleep(0.02)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with LocalProvider(LocalSettings(screen=(1280, 800))) as small, \
            LocalProvider(LocalSettings(screen=(1920, 1080))) as big:
        d = small.desktop(0)
        assert isinstance(d, LocalDesktop)
        start = time.perf_counter()
        d.reset()
        out["first_start_s"] = round(time.perf_counter() - start, 3)
        resets = []
        for _ in range(args.resets):
            _episode(d)
            start = time.perf_counter()
            d.reset()
            resets.append(time.perf_counter() - start)
        out["reset_ready_s"] = round(statistics.median(resets), 3)
        out["reset_ready_s_all"] = [round(r, 3) for r in resets]
        assert d.guest is not None and d.display is not None
        guest = d.guest
        _open_document(d, d.home)
        os.environ["DISPLAY"] = d.display
        os.environ["XAUTHORITY"] = str(d.dir / "Xauthority")
        with tempfile.TemporaryDirectory() as tmp:
            theirs = OSWorldScreenshot(d.display, Path(tmp))
            series: dict[str, list[float]] = {k: [] for k in (
                "http_png", "http_webp", "osworld_png", "act", "osworld_act")}
            for fn in (theirs, lambda: guest.screenshot()):
                fn()  # warm-up
            for _ in range(args.shots):
                series["osworld_png"].append(_ms(theirs))
                series["http_png"].append(_ms(lambda: guest.screenshot()))
                series["http_webp"].append(_ms(lambda: guest.screenshot(fmt="webp")))
            for i in range(args.actions):
                click = Click(x=600 + i % 50, y=400)
                series["act"].append(_ms(lambda c=click: d.act(c)))  # type: ignore[misc]
                code = OSWORLD_PREFIX + f"pyautogui.click({click.x}, {click.y})"
                series["osworld_act"].append(_ms(
                    lambda c=code: guest.execute(["python", "-c", c])))  # type: ignore[misc]
            theirs_png = Image.open(io.BytesIO(theirs()))
            assert theirs_png.size == (1280, 800)
        b = big.desktop(0)
        b.reset()
        assert isinstance(b, LocalDesktop) and b.guest is not None
        _open_document(b, b.home)
        bguest = b.guest
        bguest.screenshot()
        big_png = [_ms(lambda: bguest.screenshot()) for _ in range(args.shots)]
    with LocalProvider(LocalSettings(screen=(1280, 800))) as provider:
        slots = [provider.desktop(i) for i in range(args.slots)]
        start = time.perf_counter()
        with ThreadPoolExecutor(len(slots)) as pool:
            list(pool.map(lambda d: d.reset(), slots))
        out[f"start_{args.slots}_slots_s"] = round(time.perf_counter() - start, 3)
    ours = _median(series["http_png"])
    osworld = _median(series["osworld_png"])
    out.update({
        "screenshot_ms_1280x800_png": ours,
        "screenshot_ms_1920x1080_png": _median(big_png),
        "screenshot_ms_1280x800_webp": _median(series["http_webp"]),
        "osworld_screenshot_ms_1280x800_png": osworld,
        "screenshot_speedup_vs_osworld": round(osworld / ours, 2),
        "action_roundtrip_ms": _median(series["act"]),
        "osworld_action_roundtrip_ms": _median(series["osworld_act"]),
    })
    return out


def _memory_mib(container: Any) -> float:
    """Memory as ``docker stats`` shows it: usage less the inactive file cache."""
    mem = container.stats(stream=False)["memory_stats"]
    extra = mem.get("stats", {})
    cache = extra.get("total_inactive_file", extra.get("inactive_file", 0))
    return round((mem["usage"] - cache) / 2**20, 1)


def _cpu_percent(container: Any) -> float:
    """CPU use over the engine's sampling second, in percent of one core."""
    st = container.stats(stream=False)
    cpu, pre = st["cpu_stats"], st["precpu_stats"]
    used = cpu["cpu_usage"]["total_usage"] - pre.get("cpu_usage", {}).get("total_usage", 0)
    system = cpu.get("system_cpu_usage", 0) - pre.get("system_cpu_usage", 0)
    cpus = cpu.get("online_cpus") or os.cpu_count() or 1
    return round(100.0 * used / system * cpus, 2) if system > 0 else 0.0


def measure_docker(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    """The docker provider's figures (module docstring), on containers named ``prefix-*``."""
    import docker

    from worker.providers.docker import DockerProvider, DockerSettings
    from worker.providers.docker_base import DESKTOP_IMAGE
    from worker.providers.docker_desktop import ContainerDesktop

    out: dict[str, Any] = {}
    resets: dict[str, list[float]] = {}
    for mode in ("revert", "recreate"):
        settings = DockerSettings(name_prefix=f"{prefix}-{mode}", reset=mode,
                                  screen=(1280, 800))
        with DockerProvider(settings) as provider:
            d = provider.desktop(0)
            assert isinstance(d, ContainerDesktop)
            start = time.perf_counter()
            d.reset()
            if mode == "revert":
                out["docker_first_start_s"] = round(time.perf_counter() - start, 3)
            resets[mode] = []
            for _ in range(args.resets):
                _episode(d)
                start = time.perf_counter()
                d.reset()
                resets[mode].append(time.perf_counter() - start)
            if mode != "revert":
                continue
            out["docker_cpu_percent_idle_slot"] = _cpu_percent(d.container)
            idle = _memory_mib(d.container)
            _open_document(d, d.home)
            guest = d.guest
            assert guest is not None
            guest.screenshot()  # warm-up
            shots = [_ms(guest.screenshot) for _ in range(args.shots)]
            out["docker_screenshot_ms_1280x800_png"] = _median(shots)
            out["docker_memory_mib_per_slot"] = {"idle": idle,
                                                 "texstudio_open": _memory_mib(d.container)}
    # what an episode batch on --slots containers starts with: all of them at once
    with DockerProvider(DockerSettings(name_prefix=f"{prefix}-fleet")) as provider:
        fleet = [provider.desktop(i) for i in range(args.slots)]
        start = time.perf_counter()
        with ThreadPoolExecutor(len(fleet)) as pool:
            list(pool.map(lambda d: d.reset(), fleet))
        out[f"docker_start_{args.slots}_slots_s"] = round(time.perf_counter() - start, 3)
        out[f"docker_memory_mib_{args.slots}_idle_slots"] = round(sum(
            _memory_mib(d.container) for d in fleet if isinstance(d, ContainerDesktop)), 1)
    out["docker_reset_ready_s"] = {m: round(statistics.median(r), 3) for m, r in resets.items()}
    out["docker_reset_ready_s_all"] = {m: [round(x, 3) for x in r] for m, r in resets.items()}
    client = docker.from_env()
    try:
        image = client.images.get(DESKTOP_IMAGE)
        info = client.info()
        out["docker_image"] = {"name": DESKTOP_IMAGE, "id": image.short_id,
                               "size_mb": round(image.attrs["Size"] / 1e6)}
        out["docker_engine"] = {"version": info.get("ServerVersion"),
                                "storage_driver": info.get("Driver"),
                                "cgroup": info.get("CgroupVersion")}
    finally:
        client.close()
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--resets", type=int, default=10)
    p.add_argument("--shots", type=int, default=30)
    p.add_argument("--actions", type=int, default=20)
    p.add_argument("--episodes", type=int, default=8, help="episodes of the worker figures")
    p.add_argument("--slots", type=int, default=4, help="worker slots for episodes_per_min")
    p.add_argument("--record", type=Path, default=None,
                   help="write a succeeded episode's record (JSON) here")
    p.add_argument("--docker", action="store_true",
                   help="also measure the docker provider's desktop containers")
    args = p.parse_args(argv)
    configure_logging(os.environ.get("CODA_LOG_LEVEL", "INFO"))
    load_before = os.getloadavg()
    started = time.perf_counter()
    result = measure(args)
    prefix = f"coda-bench-{secrets.token_hex(3)}"
    if args.docker:
        result.update(measure_docker(args, prefix))
    if args.episodes > 0:
        if not __package__:  # run as a script (python benchmarks/env.py): find the package
            sys.path.insert(0, str(ROOT))
        from benchmarks.episodes import measure as measure_episodes

        # the worker's own time per step on one slot (nothing else competing for the 2 cores),
        # then throughput with --slots slots (whose step figures show the contention)
        alone = measure_episodes(max(1, args.episodes // 2), 1, record=args.record)
        result.update({k: alone[k] for k in ("step_overhead_ms", "step_overhead_ms_p90",
                                             "step_parts_ms_median", "steps")})
        fleet = measure_episodes(args.episodes, args.slots)
        result.update({k: fleet[k] for k in ("episodes", "episodes_completed",
                                             "episodes_succeeded", "episodes_per_min",
                                             "wall_s")})
        result[f"step_overhead_ms_{args.slots}_slots"] = fleet["step_overhead_ms"]
        result[f"step_parts_ms_median_{args.slots}_slots"] = fleet["step_parts_ms_median"]
        if args.docker:
            # local, docker, docker, local: load that drifts during the run (other processes
            # on the machine) weighs on both alike; the figures are the means of two runs
            options = {"name_prefix": f"{prefix}-episodes"}
            boxed = [measure_episodes(args.episodes, args.slots, provider="docker",
                                      provider_options=options) for _ in range(2)]
            local = [fleet, measure_episodes(args.episodes, args.slots)]

            def mean(runs: list[dict[str, Any]], key: str) -> float:
                return round(statistics.mean(r[key] for r in runs), 2)

            for name, runs in (("", local), ("docker_", boxed)):
                result[f"{name}episodes_per_min"] = mean(runs, "episodes_per_min")
                result[f"{name}episodes_per_min_runs"] = [r["episodes_per_min"] for r in runs]
                result[f"{name}wall_s_runs"] = [r["wall_s"] for r in runs]
                for key in ("episodes", "episodes_completed", "episodes_succeeded"):
                    result[f"{name}{key}"] = sum(r[key] for r in runs)
            result.pop("wall_s", None)
            result["docker_step_overhead_ms"] = mean(boxed, "step_overhead_ms")
            result["docker_vs_local_episodes_per_min"] = round(
                result["docker_episodes_per_min"] / result["episodes_per_min"], 2)
    result.update({
        "config": {"resets": args.resets, "shots": args.shots, "actions": args.actions,
                   "episodes": args.episodes, "slots": args.slots, "docker": args.docker,
                   "episode_task": "TeXstudio/C-02 (replay backend)"},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "loadavg_before": [round(x, 2) for x in load_before],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
        "seconds": round(time.perf_counter() - started, 1),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("bench.done", out=str(args.out), **{k: v for k, v in result.items()
                                            if isinstance(v, int | float)})


if __name__ == "__main__":
    main()
