"""How long ``coda up``'s supervision takes to bring a killed model service back.

A replay planner service (the one ``coda up --models replay`` runs, a uvicorn subprocess on a
free port) under :class:`coda_app.supervise.Supervisor` with ``coda up``'s policy, checked
every ``--interval`` seconds as ``coda up`` does: it is SIGKILLed ``--kills`` times, each time
once it answers again, and the time from the kill to its ``/readyz`` answering 200 is taken.
Each restart waits out its backoff (1, 2, 4 ... s); the overhead is the rest (noticing the
death, starting the process, loading the service). Written under the ``supervise`` key of
``benchmarks/results/fleet.json``.

    python -m benchmarks.supervise --kills 4
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import configure_bench_logging, loadavg, machine, median, write_result_key
from coda.logging import get_logger
from coda_app.services import ServiceProcess
from coda_app.supervise import Child, RestartPolicy, Supervisor

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "fleet.json"
log = get_logger("benchmarks.supervise")


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _until(probe: Any, timeout: float) -> float:
    """Poll ``probe`` every 10 ms until it is true; the monotonic time it became so."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError("the service did not come back")
        time.sleep(0.01)
    return time.monotonic()


def run(kills: int, interval: float) -> dict[str, Any]:
    from planner_service.settings import PlannerSettings

    before = loadavg()
    policy = RestartPolicy()
    with tempfile.TemporaryDirectory() as tmp:
        settings = PlannerSettings(backend="replay",
                                   model=str(ROOT / "examples" / "replays" / "demo.planner.json"),
                                   artifacts_url=tmp, inference_tokens=["bench-" + "x" * 24],
                                   admin_token="bench-admin-" + "y" * 20)
        service = ServiceProcess.of("planner", settings, Path(tmp) / "planner.log")
        service.start()
        service.wait_ready(timeout=120)
        sup = Supervisor([Child("planner", service.alive, service.restart, service.log_path)],
                         policy)
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                sup.check()
                stop.wait(interval)

        watcher = threading.Thread(target=loop, daemon=True)
        watcher.start()
        rows = []
        try:
            for n in range(kills):
                assert service.proc is not None
                killed = time.monotonic()
                os.kill(service.proc.pid, signal.SIGKILL)
                _until(lambda: not _ready(service.url), 30)
                back = _until(lambda: _ready(service.url), 120)
                backoff = policy.backoff_s * 2 ** n
                rows.append({"restart": n + 1, "backoff_s": backoff,
                             "kill_to_ready_s": round(back - killed, 3),
                             "overhead_s": round(back - killed - backoff, 3)})
                log.info("supervise.restarted", **rows[-1])
        finally:
            stop.set()
            watcher.join(10)
            service.stop()
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"),
            "service": "planner (replay backend)", "check_interval_s": interval,
            "policy": {"backoff_s": policy.backoff_s, "backoff_max_s": policy.backoff_max_s,
                       "max_restarts": policy.max_restarts, "window_s": policy.window_s},
            "restarts": rows,
            "overhead_median_s": median([r["overhead_s"] for r in rows], 3),
            "machine": machine(before)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=4, choices=range(1, 6),
                        help="kills in a row (at most 5: the 6th would be given up on)")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between checks (coda up: 1)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    configure_bench_logging()
    result = run(args.kills, args.interval)
    write_result_key(args.out, "supervise", result)
    log.info("supervise.done", out=str(args.out), overhead_median_s=result["overhead_median_s"],
             restarts=result["restarts"])


if __name__ == "__main__":
    main()
