"""What the benchmark scripts share: the figures of a series (median, nearest-rank percentile),
the machine and its load written beside every figure (the machine is shared and noisy), the
result file, the ``WxH`` screen argument, PNG encoding and the scripts' logging. Starting the
processes they measure is the library's (:mod:`coda.procs`, :mod:`coda_app.services`)."""

from __future__ import annotations

import io
import json
import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coda.logging import configure_logging


def median(values: Sequence[float], ndigits: int = 2) -> float:
    """The median, rounded; 0.0 for no values."""
    return round(statistics.median(values), ndigits) if values else 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]) of unsorted values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))  # ceil, in integers
    return ordered[rank - 1]


def rounded(value: float | None, ndigits: int = 2) -> float | None:
    return None if value is None else round(value, ndigits)


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def machine(loadavg_before: Sequence[float] | None = None) -> dict[str, Any]:
    """The ``machine`` object of a result: CPUs, platform, Python, and the load averages
    before the run (when given) and now, after it."""
    out: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                           "python": platform.python_version()}
    if loadavg_before is not None:
        out["loadavg_before"] = [round(x, 2) for x in loadavg_before]
    out["loadavg_after"] = loadavg()
    return out


def write_result(path: Path, doc: dict[str, Any]) -> None:
    """Write a result as indented JSON (its folder made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def write_result_key(path: Path, key: str, doc: dict[str, Any]) -> None:
    """Write ``doc`` under ``key`` of a shared result file (e.g. ``fleet.json``), keeping the
    other keys other benchmarks wrote there."""
    current: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text())
        except json.JSONDecodeError:
            loaded = {}
        current = loaded if isinstance(loaded, dict) else {}
    current[key] = doc
    write_result(path, dict(sorted(current.items())))


def parse_screen(text: str, minimum: int = 1) -> tuple[int, int]:
    """``WxH`` -> (W, H); ValueError when it is not that or a side is below ``minimum``."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"expected WxH, got {text!r}") from None
    if w < minimum or h < minimum:
        raise ValueError(f"expected WxH of at least {minimum}x{minimum}, got {text!r}")
    return w, h


def encode_png(image: Any) -> bytes:
    """A Pillow image as PNG bytes."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def configure_bench_logging() -> None:
    """The scripts' logging: ``CODA_LOG_LEVEL`` (INFO unless set)."""
    configure_logging(os.environ.get("CODA_LOG_LEVEL", "INFO"))


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy since boot (``/proc/stat``): every process,
    the short-lived ones and the container engine's included."""
    import psutil

    t = psutil.cpu_times()
    return float(sum(getattr(t, k, 0.0) for k in ("user", "system", "nice", "irq", "softirq",
                                                  "steal")))
