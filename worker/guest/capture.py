"""Fast screenshots: one persistent X connection (mss, XShm), the cursor drawn in, PNG with
fast deflate, WebP or JPEG on request, scaled on request (the encoding and scaling are
:mod:`coda.screenshots`, shared with the guest client).

OSWorld's server grabs through PIL over a new X connection per call, pastes the cursor and
saves a PNG with Pillow's defaults (adaptive filters, zlib level 6: most of its time) into one
shared file. Here the grab is shared memory on a connection kept open, and the PNG is written
unfiltered with ISA-L's deflate (``isal``, level 1: about ten times faster than zlib's level 1
for a similar size). Screenshots are serialised per display.

Each screenshot allocates some 15 MB of short-lived buffers (the grab, the RGB copy, the PNG
rows). glibc gives blocks that large back to the kernel when they are freed, so every new one
page-faults in again: on a busy 2-core host that was two thirds of a screenshot's time.
:func:`keep_large_buffers` keeps them in the agent's heap instead (``mallopt``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from dataclasses import dataclass

import mss
from mss.exception import ScreenShotError
from PIL import Image

from coda.contracts.desktop import ImageFormat
from coda.logging import get_logger
from coda.screenshots import encode, scale

log = get_logger("worker.guest")


def keep_large_buffers(mmap_threshold: int = 32 << 20, trim_threshold: int = 256 << 20) -> bool:
    """Serve allocations below ``mmap_threshold`` from the heap and keep up to
    ``trim_threshold`` of freed heap, so screenshot buffers are reused warm (glibc only)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        libc = None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # <malloc.h>
    return bool(mallopt(m_mmap_threshold, mmap_threshold)) and bool(
        mallopt(m_trim_threshold, trim_threshold))


class DisplayUnavailable(RuntimeError):
    """The X server is gone or refuses the connection."""


@dataclass(frozen=True)
class Shot:
    data: bytes
    format: ImageFormat
    width: int
    height: int
    screen_width: int
    screen_height: int
    elapsed_ms: float


class ScreenCapture:
    """Grabs the whole screen of one display, cursor included; thread-safe."""

    def __init__(self, display: str | None) -> None:
        self.display = display
        self._lock = threading.Lock()
        self._sct: mss.MSS | None = None

    def _connection(self) -> mss.MSS:
        if self._sct is None:
            try:
                self._sct = mss.MSS(display=self.display, with_cursor=True)
            except ScreenShotError as exc:
                raise DisplayUnavailable(f"cannot open display {self.display}: {exc}") from exc
        return self._sct

    def _drop(self) -> None:
        if self._sct is not None:
            try:
                self._sct.close()
            except (ScreenShotError, OSError) as exc:  # a dead connection may fail to close
                log.info("guest.capture_close_failed", display=self.display, error=str(exc))
        self._sct = None

    def grab(self) -> Image.Image:
        """The screen as an RGB image (cursor drawn in)."""
        with self._lock:
            try:
                sct = self._connection()
                shot = sct.grab(sct.monitors[0])
            except ScreenShotError as exc:
                self._drop()  # reconnect next time: the X server may have come back
                raise DisplayUnavailable(f"display {self.display}: {exc}") from exc
        return Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX")

    def shot(self, *, fmt: ImageFormat = "png", width: int | None = None,
             height: int | None = None, quality: int | None = None) -> Shot:
        """Grab and encode; ``width``/``height`` scale (one of them keeps the aspect ratio)."""
        start = time.perf_counter()
        img = self.grab()
        sw, sh = img.size
        img = scale(img, width, height)
        data = encode(img, fmt, quality)
        return Shot(data, fmt, img.width, img.height, sw, sh,
                    (time.perf_counter() - start) * 1000)

    def close(self) -> None:
        with self._lock:
            self._drop()
