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

With ``--vsphere`` the ``vsphere`` provider against VMware's simulator vcsim (``coda_app/vcsim.py``,
the binary of ``scripts/vcsim.sh``), its VMs backed by the desktop image, is measured too (every
key starts with ``vsphere_``):

* ``vsphere_first_start_s`` and ``vsphere_reset_ready_s`` (median of ``--resets`` resets after
  the same "episode"; ``*_all`` lists them), per reset mode: ``clone`` (power off and destroy
  the slot's clone, clone the template anew, power on, the address from ``guest.ipAddress``,
  the ready probe) and ``revert`` (revert the VM's snapshot, power it off and on, the address,
  the ready probe; the desktop restores its home at boot);
* ``vsphere_episodes_per_min``: the episodes of ``episodes_per_min`` (same task, models, count
  and slots) with the worker's slots as clones in vcsim, beside desktop containers of the
  ``docker`` provider in the same run (``vsphere_docker_episodes_per_min``): the fleets run
  docker, vsphere, vsphere, docker, the figures are the means of two runs each, and
  ``vsphere_vs_docker_episodes_per_min`` is their ratio;
* ``vsphere_simulator``: what answered (vcsim's about string), ``vsphere_machine``: the load
  before and after these figures.

``--vsphere-only`` measures just those and merges them into ``--out`` (its other keys stay).

Ours and theirs alternate, so load from other processes hits both alike.

With ``--grass`` only GRASS GIS's figures are measured and merged into ``--out`` (its other keys
kept): ``grass_launch_ready_s`` (ScienceBoard task A-01's setup on a fresh slot: the ``.gislock``
clean-up, then ``grass --gui`` launched with the state reader until the Layer Manager, a map
display and the data catalog are up) and ``grass_reset_ready_s`` (a slot with that GUI open
reset: GUI closed, home and data sets restored, desktop ready), medians of ``--grass-runs``; with
``--docker`` also ``docker_grass_launch_ready_s`` and ``docker_grass_reset_ready_s`` in a
desktop container.

    python -m benchmarks.env --docker --out benchmarks/results/env.json
    python -m benchmarks.env --vsphere-only --out benchmarks/results/env.json
    python -m benchmarks.env --grass --docker --grass-runs 3
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import io
import json
import os
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

from benchmarks.common import configure_bench_logging, machine, median, write_result
from coda.actions import Click
from coda.logging import get_logger
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
    while not any("main.tex" in w.title for w in guest.windows() or []):
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
    ours = median(series["http_png"])
    osworld = median(series["osworld_png"])
    out.update({
        "screenshot_ms_1280x800_png": ours,
        "screenshot_ms_1920x1080_png": median(big_png),
        "screenshot_ms_1280x800_webp": median(series["http_webp"]),
        "osworld_screenshot_ms_1280x800_png": osworld,
        "screenshot_speedup_vs_osworld": round(osworld / ours, 2),
        "action_roundtrip_ms": median(series["act"]),
        "osworld_action_roundtrip_ms": median(series["osworld_act"]),
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
    from worker.providers.docker_base import project_image
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
            out["docker_screenshot_ms_1280x800_png"] = median(shots)
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
        image = client.images.get(project_image("desktop"))
        info = client.info()
        out["docker_image"] = {"name": project_image("desktop"), "id": image.short_id,
                               "size_mb": round(image.attrs["Size"] / 1e6)}
        out["docker_engine"] = {"version": info.get("ServerVersion"),
                                "storage_driver": info.get("Driver"),
                                "cgroup": info.get("CgroupVersion")}
    finally:
        client.close()
    return out


def _reset_series(desktop: Desktop, resets: int) -> tuple[float, list[float]]:
    """Start from nothing, then ``resets`` resets each after an "episode" (seconds)."""
    start = time.perf_counter()
    desktop.reset()
    first = time.perf_counter() - start
    series = []
    for _ in range(resets):
        _episode(desktop)
        start = time.perf_counter()
        desktop.reset()
        series.append(time.perf_counter() - start)
    return first, series


def measure_vsphere(args: argparse.Namespace, prefix: str) -> dict[str, Any]:
    """The vsphere provider's figures on vcsim (module docstring); VMs named ``prefix-*``."""
    import docker

    from coda_app.vcsim import create_vm, desktop_run, running
    from worker.providers.docker_base import project_image
    from worker.providers.factory import make_provider

    if not __package__:
        sys.path.insert(0, str(ROOT))
    from benchmarks.episodes import measure as measure_episodes

    load_before = os.getloadavg()
    client = docker.from_env()
    try:  # by id: the tag is shared with other checkouts that may rebuild it meanwhile
        image = str(client.images.get(project_image("desktop")).id)
    finally:
        client.close()
    out: dict[str, Any] = {}
    with running() as sim:
        si = sim.connect()
        about = si.content.about
        out["vsphere_simulator"] = {"server": about.fullName, "api": about.apiVersion,
                                    "url": sim.url}
        template, vm = f"{prefix}-template", f"{prefix}-vm-0"
        run = desktop_run(image, network=sim.network)
        create_vm(si, template, run, snapshot="sci_bench", template=True)
        create_vm(si, vm, run, snapshot="sci_bench")
        modes: dict[str, dict[str, Any]] = {
            "clone": {"template": template, "clone_prefix": f"{prefix}-clone"},
            "revert": {"vm_names": [vm]}}
        first: dict[str, float] = {}
        resets: dict[str, list[float]] = {}
        for mode, options in modes.items():
            with make_provider("vsphere", sim.options(mode=mode, **options)) as provider:
                first[mode], resets[mode] = _reset_series(provider.desktop(0), args.resets)
        out["vsphere_first_start_s"] = {m: round(v, 3) for m, v in first.items()}
        out["vsphere_reset_ready_s"] = {m: round(statistics.median(r), 3)
                                        for m, r in resets.items()}
        out["vsphere_reset_ready_s_all"] = {m: [round(x, 3) for x in r]
                                            for m, r in resets.items()}
        if args.episodes > 0:
            fleets = {"docker": {"name_prefix": f"{prefix}-episodes"},
                      "vsphere": sim.options(mode="clone", template=template,
                                             clone_prefix=f"{prefix}-episode")}
            runs: dict[str, list[dict[str, Any]]] = {"docker": [], "vsphere": []}
            for i, name in enumerate(("docker", "vsphere", "vsphere", "docker")):
                record = args.vsphere_record if name == "vsphere" and i == 1 else None
                runs[name].append(measure_episodes(args.episodes, args.slots, provider=name,
                                                   provider_options=fleets[name],
                                                   record=record))
            for label, key in (("vsphere", "vsphere_"), ("docker", "vsphere_docker_")):
                done = runs[label]
                out[f"{key}episodes_per_min"] = round(
                    statistics.mean(r["episodes_per_min"] for r in done), 2)
                out[f"{key}episodes_per_min_runs"] = [r["episodes_per_min"] for r in done]
                out[f"{key}wall_s_runs"] = [r["wall_s"] for r in done]
                out[f"{key}step_overhead_ms"] = round(
                    statistics.mean(r["step_overhead_ms"] for r in done), 2)
                for k in ("episodes", "episodes_completed", "episodes_succeeded"):
                    out[f"{key}{k}"] = sum(r[k] for r in done)
            out["vsphere_vs_docker_episodes_per_min"] = round(
                out["vsphere_episodes_per_min"] / out["vsphere_docker_episodes_per_min"], 2)
    out["vsphere_config"] = {"resets": args.resets, "episodes": args.episodes,
                             "slots": args.slots, "episode_task": "TeXstudio/C-02 (replay backend)",
                             "episode_mode": "clone"}
    out["vsphere_machine"] = {"cpus": os.cpu_count(),
                              "loadavg_before": [round(x, 2) for x in load_before],
                              "loadavg_after": [round(x, 2) for x in os.getloadavg()]}
    out["vsphere_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return out


def measure_grass(desktop: Desktop, runs: int, prefix: str = "") -> dict[str, Any]:
    """GRASS GIS launch-to-ready and reset-to-ready on ``desktop`` (module docstring)."""
    from coda.tasks import load_task_file
    from worker.tasks import TaskContext, run_setup

    task = load_task_file(ROOT / "examples/scienceboard/VM/GrassGIS/A-01.json")
    launches, resets = [], []
    desktop.reset()
    for _ in range(runs):
        ctx = TaskContext.for_desktop(desktop, task)
        start = time.perf_counter()
        report = run_setup(ctx)
        launches.append(time.perf_counter() - start)
        if not report.ok:
            raise RuntimeError(f"GRASS GIS's setup failed: {report.first_problem}")
        start = time.perf_counter()
        desktop.reset()
        resets.append(time.perf_counter() - start)
    return {f"{prefix}grass_launch_ready_s": round(statistics.median(launches), 3),
            f"{prefix}grass_launch_ready_s_all": [round(x, 3) for x in launches],
            f"{prefix}grass_reset_ready_s": round(statistics.median(resets), 3),
            f"{prefix}grass_reset_ready_s_all": [round(x, 3) for x in resets]}


def main_grass(args: argparse.Namespace) -> None:
    """``--grass``: GRASS GIS's figures merged into ``--out`` (new keys; the rest kept)."""
    load_before = os.getloadavg()
    out: dict[str, Any] = {}
    with LocalProvider(LocalSettings(screen=(1280, 800))) as provider:
        out.update(measure_grass(provider.desktop(0), args.grass_runs))
    if args.docker:
        from worker.providers.docker import DockerProvider, DockerSettings

        prefix = f"coda-bench-{secrets.token_hex(3)}"
        settings = DockerSettings(name_prefix=f"{prefix}-grass", image=args.docker_image)
        with DockerProvider(settings) as boxed:
            out.update(measure_grass(boxed.desktop(0), args.grass_runs, prefix="docker_"))
            image = settings.client().images.get(settings.image_name)
        out["docker_grass_image"] = {"name": settings.image_name, "id": image.id[:19]}
    out["grass_machine"] = {"cpus": os.cpu_count(), "runs": args.grass_runs,
                            "loadavg_before": [round(x, 2) for x in load_before],
                            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                            "at": datetime.now(UTC).isoformat(timespec="seconds")}
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update(out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    log.info("bench.grass", out=str(args.out), **{k: v for k, v in out.items()
                                                 if isinstance(v, int | float)})


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
    p.add_argument("--grass", action="store_true",
                   help="only GRASS GIS's figures, merged into --out")
    p.add_argument("--grass-runs", type=int, default=5)
    p.add_argument("--docker-image", default=None,
                   help="--grass --docker: the desktop image (default coda-desktop:latest)")
    p.add_argument("--vsphere", action="store_true",
                   help="also measure the vsphere provider on VMware's simulator vcsim")
    p.add_argument("--vsphere-only", action="store_true",
                   help="only the vsphere figures, merged into --out (its other keys stay)")
    p.add_argument("--vsphere-record", type=Path, default=None,
                   help="write a succeeded vsphere episode's record (JSON) here")
    args = p.parse_args(argv)
    configure_bench_logging()
    if args.grass:
        main_grass(args)
        return
    prefix = f"coda-bench-{secrets.token_hex(3)}"
    if args.vsphere_only:
        started = time.perf_counter()
        merged = json.loads(args.out.read_text()) if args.out.exists() else {}
        merged.update(measure_vsphere(args, prefix))
        merged["vsphere_seconds"] = round(time.perf_counter() - started, 1)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(merged, indent=2) + "\n")
        log.info("bench.done", out=str(args.out), **{k: v for k, v in merged.items()
                                                if k.startswith("vsphere_")
                                                and isinstance(v, int | float)})
        return
    load_before = os.getloadavg()
    started = time.perf_counter()
    result = measure(args)
    if args.docker:
        result.update(measure_docker(args, prefix))
    if args.vsphere:
        result.update(measure_vsphere(args, prefix))
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
        "machine": machine(load_before),
        "seconds": round(time.perf_counter() - started, 1),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    write_result(args.out, result)
    log.info("bench.done", out=str(args.out), **{k: v for k, v in result.items()
                                            if isinstance(v, int | float)})


if __name__ == "__main__":
    main()
