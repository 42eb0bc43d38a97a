"""Capacity of one VM server: episodes per minute with 1, 2, 4 and 8 desktop containers
beside the same numbers of local desktops, in one run, with their spread, memory and CPU per
slot, and the container/local ratio per slot count.

Everything but model inference is real: one master (its own Postgres and Redis, configured or
embedded) and the planner and executor services on the replay backend (the recorded outputs of
``--app``'s task, as :mod:`benchmarks.episodes` uses) serve every run; each run is a fresh
``coda worker`` with ``n`` slots of one provider (``docker``: desktop containers of
``coda-desktop:latest``; ``local``: Xvfb desktops on this host) running the real application.

A run: the worker starts, rolls out a warm-up batch of ``n`` episodes (desktops started: the
cold figure, ``cold_episodes_per_min``), then the measured batch of ``n * --episodes-per-slot``
episodes on the warm desktops (``episodes_per_min``: what a VM server does all day). While the
measured batch runs, memory and CPU are sampled every second:

* ``mem_mib_per_slot``: the desktops' memory over ``n`` (median of the samples): local, the RSS
  of every process under the worker (Xvfb, window manager, agent, the application); docker,
  each container's memory as ``docker stats`` counts it (usage less inactive file cache, from
  the cgroup). RSS counts shared pages once per process, the cgroup once per container;
* ``cpu_cores_per_slot``: CPU seconds over wall seconds over ``n``: the worker process and its
  desktops (local: its process tree; docker: the worker, the containers' cgroups and the
  ``docker-proxy`` processes of their published ports);
* ``machine_cpu_s_per_episode`` / ``machine_cores_busy``: the whole machine's busy CPU
  seconds over the batch (``/proc/stat``: everything, the engine's dockerd, containerd and
  runc and processes too short-lived for a 1 s sample included; the master and the model
  services too, alike for both providers) per completed episode, and over the wall time;
* per run the median step timings (``StepTimings``: observe, upload, plan, execute, act,
  settle, ...) and per episode the reset (``desktop.reset`` in the worker's log), the steps and
  the rest (setup, application launch, checkers), so a gap has a place.

Runs are interleaved: for each repeat, for each slot count, docker then local (the order
flips every repeat), so load that drifts (the machine is shared) weighs on both alike; the
summary gives per configuration the median, min and max of the runs, and per slot count the
ratio of the medians (``ratio``) and of each repeat's pair (``ratio_runs``). Written under key
``capacity`` of ``benchmarks/results/fleet.json``.

    python -m benchmarks.capacity --slots 1,2,4,8 --repeats 3 --episodes-per-slot 2
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import (
    configure_bench_logging,
    machine,
    machine_busy_s,
    median,
    write_result_key,
)
from benchmarks.episodes import PARTS, worker_process
from benchmarks.master_load import Master, local_master
from coda.logging import get_logger
from coda_app.services import ServiceProcess, running_services

ROOT = Path(__file__).resolve().parents[1]
REPLAYS = ROOT / "examples" / "replays"
TASKS = ROOT / "examples" / "scienceboard" / "VM"
APPS = {"texstudio": ("TeXstudio/C-02", "texstudio-C-02"),
        "kalgebra": ("KAlgebra/C-01", "kalgebra-C-01")}
PROVIDERS = ("docker", "local")
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "fleet.json"
KEY = "capacity"
CGROUP = Path("/sys/fs/cgroup")
log = get_logger("benchmarks.capacity")


# ------------------------------------------------------------------------------ arguments


def slot_list(text: str) -> list[int]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8] (distinct, ascending); ValueError when not that."""
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ValueError(f"expected slot counts like 1,2,4,8, got {text!r}") from None
    if not values or values[0] < 1 or values[-1] > 64:
        raise ValueError(f"expected slot counts from 1 to 64, got {text!r}")
    return values


def _slots_arg(text: str) -> list[int]:
    try:
        return slot_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--slots", type=_slots_arg, default=[1, 2, 4, 8],
                   help="slot counts, comma-separated (default 1,2,4,8)")
    p.add_argument("--repeats", type=_positive, default=2,
                   help="runs per provider and slot count")
    p.add_argument("--episodes-per-slot", type=_positive, default=2,
                   help="measured episodes per slot and run (after a warm-up of one per slot)")
    p.add_argument("--app", choices=sorted(APPS), default="texstudio")
    p.add_argument("--providers", default=",".join(PROVIDERS),
                   help="which fleets, comma-separated (docker,local)")
    p.add_argument("--docker-options", default="{}",
                   help="extra provider_options of the docker fleet (JSON)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="per batch")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--key", default=KEY, help="top-level key of --out written")
    p.add_argument("--logs", type=Path, default=None,
                   help="keep each run's worker log in this folder")
    args = p.parse_args(argv)
    providers = [v.strip() for v in args.providers.split(",") if v.strip()]
    if not providers or any(v not in PROVIDERS for v in providers):
        p.error(f"--providers: expected some of {','.join(PROVIDERS)}, got {args.providers!r}")
    args.providers = providers
    try:
        args.docker_options = json.loads(args.docker_options)
    except json.JSONDecodeError as exc:
        p.error(f"--docker-options: not JSON: {exc}")
    if not isinstance(args.docker_options, dict):
        p.error("--docker-options: expected a JSON object")
    return args


def schedule(slots: Sequence[int], repeats: int,
             providers: Sequence[str] = PROVIDERS) -> list[tuple[int, int, str]]:
    """(repeat, slots, provider) in run order: per repeat every slot count, both providers
    back to back, their order flipped every repeat."""
    out: list[tuple[int, int, str]] = []
    for r in range(repeats):
        order = list(providers) if r % 2 == 0 else list(reversed(providers))
        out.extend((r, n, p) for n in slots for p in order)
    return out


# -------------------------------------------------------------------------------- summary


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and the values (rounded)."""
    if not values:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "runs": []}
    return {"median": median(values), "min": round(min(values), 2),
            "max": round(max(values), 2), "runs": [round(v, 2) for v in values]}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b > 0 else None


def summarize(runs: Sequence[dict[str, Any]], target: float = 0.9) -> dict[str, Any]:
    """Per slot count and provider the spread of the runs, per slot count the container/local
    ratio (of the medians, and of each repeat's pair) (pure)."""
    curve: list[dict[str, Any]] = []
    for n in sorted({r["slots"] for r in runs}):
        row: dict[str, Any] = {"slots": n}
        for prov in PROVIDERS:
            mine = [r for r in runs if r["slots"] == n and r["provider"] == prov]
            if not mine:
                continue

            def med(key: str, rs: list[dict[str, Any]] = mine) -> float:
                return median([r[key] for r in rs if r.get(key) is not None])

            parts = [r["step_parts_ms_median"] for r in mine if r.get("step_parts_ms_median")]
            row[prov] = {
                "episodes_per_min": spread([r["episodes_per_min"] for r in mine]),
                "cold_episodes_per_min": med("cold_episodes_per_min"),
                "episodes": sum(r["episodes"] for r in mine),
                "episodes_completed": sum(r["episodes_completed"] for r in mine),
                "episodes_succeeded": sum(r["episodes_succeeded"] for r in mine),
                "episode_s_median": med("episode_s_median"),
                "reset_s_median": med("reset_s_median"),
                "steps_s_median": med("steps_s_median"),
                "other_s_median": med("other_s_median"),
                "step_parts_ms_median": {p: median([x[p] for x in parts if p in x])
                                         for p in PARTS} if parts else {},
                "cpu_cores_per_slot": med("cpu_cores_per_slot"),
                "mem_mib_per_slot": med("mem_mib_per_slot"),
                "mem_mib_per_slot_peak": max((r.get("mem_mib_per_slot_peak") or 0.0)
                                             for r in mine),
                "worker_rss_mib": med("worker_rss_mib"),
                "machine_cores_busy": med("machine_cores_busy"),
                "machine_cpu_s_per_episode": med("machine_cpu_s_per_episode"),
            }
        if "docker" in row and "local" in row:
            d, loc = row["docker"]["episodes_per_min"], row["local"]["episodes_per_min"]
            row["ratio"] = _ratio(d["median"], loc["median"])
            pairs: dict[int, dict[str, float]] = {}
            for r in runs:
                if r["slots"] == n:
                    pairs.setdefault(r["repeat"], {})[r["provider"]] = r["episodes_per_min"]
            row["ratio_runs"] = [_ratio(p["docker"], p["local"]) for _, p in sorted(pairs.items())
                                 if "docker" in p and "local" in p]
            row["ratio_min"] = _ratio(d["min"], loc["max"])
            row["ratio_max"] = _ratio(d["max"], loc["min"])
        curve.append(row)
    ratios = [row["ratio"] for row in curve if row.get("ratio") is not None]
    return {"curve": curve, "ratio_target": target,
            "ratio_min_over_slots": min(ratios) if ratios else None,
            "ratio_holds": bool(ratios) and all(r >= target for r in ratios)}


# ------------------------------------------------------------------------ resource sampling


@dataclass
class Usage:
    """Memory and CPU of one fleet (the worker and its desktops), sampled every ``period``
    seconds in a thread while a batch runs."""

    provider: str
    worker_pid: int
    prefix: str
    slots: int
    period: float = 1.0
    mem: list[float] = field(default_factory=list)  # desktops' bytes per sample
    worker_rss: list[float] = field(default_factory=list)
    cpu_first: dict[str, float] = field(default_factory=dict)
    cpu_last: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _containers: list[tuple[str, str]] = field(default_factory=list)  # (id, ip)
    machine_busy: list[float] = field(default_factory=list)  # at the start, at the end

    def __enter__(self) -> Usage:
        if self.provider == "docker":
            self._containers = _containers(self.prefix)
        self.machine_busy = [machine_busy_s()]
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="usage", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.machine_busy.append(machine_busy_s())

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def _cpu(self, key: str, seconds: float) -> None:
        self.cpu_first.setdefault(key, seconds)
        self.cpu_last[key] = seconds

    def _sample(self) -> None:
        import psutil

        try:
            worker = psutil.Process(self.worker_pid)
            tree = [worker, *worker.children(recursive=True)]
        except psutil.Error:
            return
        desktops = 0.0
        for proc in tree:
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    rss = proc.memory_info().rss
                    key = f"pid:{proc.pid}:{proc.create_time()}"
            except psutil.Error:
                continue
            self._cpu(key, t.user + t.system)
            if proc.pid == self.worker_pid:
                self.worker_rss.append(rss)
            else:
                desktops += rss
        if self.provider == "docker":
            ips = {ip for _, ip in self._containers}
            for cid, _ in self._containers:
                usage = _cgroup_cpu_s(cid)
                if usage is not None:
                    self._cpu(f"container:{cid}", usage)
                desktops += _cgroup_mem(cid) or 0.0
            for proc in psutil.process_iter(["name", "cmdline"]):
                if proc.info["name"] != "docker-proxy":
                    continue
                if not ips & set(proc.info["cmdline"] or []):
                    continue
                try:
                    t = proc.cpu_times()
                    self._cpu(f"proxy:{proc.pid}:{proc.create_time()}", t.user + t.system)
                except psutil.Error:
                    continue
        self.mem.append(desktops)

    def figures(self, wall_s: float, episodes: int) -> dict[str, Any]:
        cpu = sum(max(0.0, self.cpu_last[k] - self.cpu_first[k]) for k in self.cpu_last)
        busy = self.machine_busy[-1] - self.machine_busy[0] if len(self.machine_busy) == 2 \
            else None
        proxy = sum(max(0.0, self.cpu_last[k] - self.cpu_first[k])
                    for k in self.cpu_last if k.startswith("proxy:"))
        mib = [m / 2**20 / self.slots for m in self.mem if m > 0]
        return {"cpu_cores_per_slot": round(cpu / wall_s / self.slots, 3) if wall_s else None,
                "cpu_s": round(cpu, 1), "proxy_cpu_s": round(proxy, 2),
                "mem_mib_per_slot": median(mib, 1), "mem_mib_per_slot_peak":
                    round(max(mib), 1) if mib else None,
                "worker_rss_mib": median([m / 2**20 for m in self.worker_rss], 1),
                "machine_cores_busy": round(busy / wall_s, 3) if busy and wall_s else None,
                "machine_cpu_s_per_episode": round(busy / episodes, 3)
                if busy and episodes else None}


def _containers(prefix: str) -> list[tuple[str, str]]:
    """(id, bridge address) of the running desktop containers with this name prefix."""
    import docker

    from worker.providers.docker_desktop import PREFIX_LABEL

    client = docker.from_env()
    try:
        found = client.containers.list(filters={"label": f"{PREFIX_LABEL}={prefix}"})
        return [(c.id, c.attrs["NetworkSettings"].get("IPAddress") or "") for c in found]
    finally:
        client.close()


def _cg(controller: str, cid: str) -> Path:
    """A container's cgroup v1 folder: under /docker, or under its ``cgroup_parent``."""
    found = list((CGROUP / controller).glob(f"*/{cid}"))
    return found[0] if found else CGROUP / controller / "docker" / cid


def _cgroup_cpu_s(cid: str) -> float | None:
    for path in (_cg("cpuacct", cid) / "cpuacct.usage", _cg("cpu,cpuacct", cid) / "cpuacct.usage"):
        try:
            return int(path.read_text()) / 1e9
        except (OSError, ValueError):
            continue
    path = CGROUP / "system.slice" / f"docker-{cid}.scope" / "cpu.stat"  # cgroup v2
    try:
        fields = dict(line.split() for line in path.read_text().splitlines())
        return int(fields["usage_usec"]) / 1e6
    except (OSError, ValueError, KeyError):
        return None


def _cgroup_mem(cid: str) -> float | None:
    """Usage less inactive file cache (``docker stats``), bytes."""
    for base, usage_file, inactive in (
            (_cg("memory", cid), "memory.usage_in_bytes", "total_inactive_file"),
            (CGROUP / "system.slice" / f"docker-{cid}.scope", "memory.current",
             "inactive_file")):
        try:
            usage = int((base / usage_file).read_text())
            stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
            return float(usage - int(stat.get(inactive, 0)))
        except (OSError, ValueError):
            continue
    return None


# ---------------------------------------------------------------------------------- runs


@contextmanager
def replay_services(app: str, work: Path, token: str) -> Iterator[tuple[str, str]]:
    """The planner and executor on the replay backend with ``app``'s recorded outputs."""
    from executor_service.settings import ExecutorSettings
    from planner_service.settings import PlannerSettings

    stem = APPS[app][1]
    common: dict[str, Any] = {"backend": "replay", "artifacts_url": str(work / "artifacts"),
                              "inference_tokens": token,
                              "admin_token": "admin-" + secrets.token_hex(16)}
    planner = ServiceProcess.of("planner", PlannerSettings(
        model=str(REPLAYS / f"{stem}.planner.json"), adapter_cache_dir=str(work / "adapters"),
        **common), work / "planner.log")
    executor = ServiceProcess.of("executor", ExecutorSettings(
        model=str(REPLAYS / f"{stem}.executor.json"), **common), work / "executor.log")
    with running_services(planner, executor):
        yield planner.url, executor.url


def run_batch(admin: httpx.Client, task: dict[str, Any], count: int,
              timeout_s: float, worker_log: Path) -> tuple[list[str], float]:
    """Submit ``count`` rollouts of ``task``, wait until all finished: (episode ids, wall s)."""
    started = time.monotonic()
    created = admin.post("/v1/batches", json={"tasks": [task], "rollouts": count,
                                              "judge": "never"})
    created.raise_for_status()
    batch = created.json()["batch"]["id"]
    while True:
        progress = admin.get(f"/v1/batches/{batch}").json()["progress"]
        if progress["completed"] + progress["failed"] >= count:
            break
        if time.monotonic() - started > timeout_s:
            tail = worker_log.read_text(errors="replace")[-3000:]
            raise TimeoutError(f"{progress} after {timeout_s} s; worker log: {tail}")
        time.sleep(0.25)
    return created.json()["episode_ids"], time.monotonic() - started


def _log_events(path: Path, offset: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with path.open("rb") as f:
        f.seek(offset)
        for line in f:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
    return out


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def episode_phases(events: Sequence[dict[str, Any]],
                   records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per episode: its seconds in the worker (``episode.start`` to ``episode.end``), the
    reset (``desktop.reset``), the steps (sum of their timings) and the rest; medians (pure)."""
    starts: dict[str, float] = {}
    ends: dict[str, float] = {}
    for e in events:
        if e.get("event") == "episode.start" and "timestamp" in e:
            starts[e["episode"]] = _ts(e["timestamp"])
        elif e.get("event") == "episode.end" and "timestamp" in e:
            ends[e["episode"]] = _ts(e["timestamp"])
    resets = [float(e["seconds"]) for e in events if e.get("event") == "desktop.reset"]
    steps_s = {str(r["id"]): sum(s["timings"]["total"] for s in r.get("steps") or []
                                 if s.get("timings")) / 1000 for r in records}
    durations = {k: ends[k] - starts[k] for k in ends if k in starts}
    reset_med = statistics.median(resets) if resets else 0.0
    others = [d - steps_s.get(k, 0.0) - reset_med for k, d in durations.items()]
    return {"episode_s_median": median(list(durations.values())),
            "reset_s_median": round(reset_med, 2),
            "steps_s_median": median([steps_s[k] for k in durations if k in steps_s]),
            "other_s_median": median(others)}


def step_parts(records: Sequence[dict[str, Any]]) -> dict[str, float]:
    timings = [s["timings"] for r in records for s in r.get("steps") or [] if s.get("timings")]
    return {p: median([t[p] for t in timings]) for p in PARTS}


def run_once(master: Master, admin: httpx.Client, services: tuple[str, str], token: str,
             provider: str, slots: int, args: argparse.Namespace, work: Path, tag: str,
             ) -> dict[str, Any]:
    task = json.loads((TASKS / f"{APPS[args.app][0]}.json").read_text())
    prefix = f"coda-cap-{os.getpid()}-{tag}"
    options: dict[str, Any] = ({"name_prefix": prefix, **args.docker_options}
                               if provider == "docker" else {})
    wlog = work / f"worker-{tag}.log"
    load_before = list(os.getloadavg())
    planner, executor = services
    with worker_process(master, planner, executor, token, slots, wlog, provider, options,
                        log_level="INFO") as proc:
        _, cold = run_batch(admin, task, slots, args.timeout_s, wlog)
        offset = wlog.stat().st_size
        count = slots * args.episodes_per_slot
        with Usage(provider, proc.pid, prefix, slots) as usage:
            ids, wall = run_batch(admin, task, count, args.timeout_s, wlog)
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
        shutil.copy(wlog, args.logs / wlog.name)
    records = [admin.get(f"/v1/episodes/{i}", params={"steps": "true"}).json() for i in ids]
    done = [r for r in records if r["status"] == "completed"]
    out: dict[str, Any] = {
        "provider": provider, "slots": slots, "episodes": count,
        "episodes_completed": len(done),
        "episodes_succeeded": sum(1 for r in done if r.get("success")),
        "episodes_per_min": round(len(done) / (wall / 60), 2),
        "wall_s": round(wall, 1),
        "cold_episodes_per_min": round(slots / (cold / 60), 2), "cold_wall_s": round(cold, 1),
        "step_parts_ms_median": step_parts(records),
        **episode_phases(_log_events(wlog, offset), records),
        **usage.figures(wall, len(done)),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    return out


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    token = "inference-" + secrets.token_hex(16)
    runs: list[dict[str, Any]] = []
    plan = schedule(args.slots, args.repeats, args.providers)
    with tempfile.TemporaryDirectory(prefix="coda-bench-capacity-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)  # embedded Postgres may run as another user
        margs = argparse.Namespace(lease_ttl_s=60.0, workers=1, master_log=work / "master.log")
        with local_master(margs, work) as master, \
                replay_services(args.app, work, token) as services:
            admin = httpx.Client(base_url=master.url, timeout=60, headers={
                "authorization": f"Bearer {master.admin_token}"})
            for i, (repeat, n, prov) in enumerate(plan, 1):
                started = time.monotonic()
                run = run_once(master, admin, services, token, prov, n, args, work,
                               f"{prov}-{n}-{repeat}")
                run["repeat"] = repeat
                runs.append(run)
                log.info("capacity.run", run=f"{i}/{len(plan)}", provider=prov, slots=n,
                         repeat=repeat, episodes_per_min=run["episodes_per_min"],
                         completed=f"{run['episodes_completed']}/{run['episodes']}",
                         cpu_cores_per_slot=run["cpu_cores_per_slot"],
                         mem_mib_per_slot=run["mem_mib_per_slot"],
                         reset_s=run["reset_s_median"], episode_s=run["episode_s_median"],
                         seconds=round(time.monotonic() - started, 1),
                         loadavg=run["loadavg_after"])
            admin.close()
    return runs


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    configure_bench_logging()
    started = time.monotonic()
    before = list(os.getloadavg())
    runs = measure(args)
    result: dict[str, Any] = summarize(runs)
    result.update({
        "config": {"slots": args.slots, "repeats": args.repeats,
                   "episodes_per_slot": args.episodes_per_slot, "app": APPS[args.app][0],
                   "models": "replay backend", "providers": args.providers,
                   "docker_options": args.docker_options},
        "runs": runs,
        "machine": machine(before),
        "seconds": round(time.monotonic() - started, 1),
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    write_result_key(args.out, args.key, result)
    for row in result["curve"]:
        log.info("capacity.slots", slots=row["slots"], ratio=row.get("ratio"),
                 ratio_runs=row.get("ratio_runs"),
                 **{p: row[p]["episodes_per_min"]["median"] for p in PROVIDERS if p in row})
    log.info("capacity.done", out=str(args.out), key=args.key,
             ratio_min=result["ratio_min_over_slots"], holds=result["ratio_holds"])


if __name__ == "__main__":
    main()
