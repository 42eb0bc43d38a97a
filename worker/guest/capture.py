"""Fast screenshots: one persistent X connection (mss, XShm), the cursor drawn in, PNG with
fast deflate, WebP or JPEG on request, scaled on request.

OSWorld's server grabs through PIL over a new X connection per call, pastes the cursor and
saves a PNG at the default level into one shared file; here the grab is shared memory on a
connection kept open, and the PNG is written unfiltered at zlib level 1 (``mss.tools.to_png``),
which is where most of the time went. Screenshots are serialised per display.
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from dataclasses import dataclass
from typing import Any

import mss
import mss.tools
from mss.exception import ScreenShotError
from PIL import Image

from coda.contracts.desktop import ImageFormat

PNG_LEVEL = 1
DEFAULT_QUALITY = {"webp": 80, "jpeg": 85}


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
            with contextlib.suppress(Exception):  # a dead connection may fail to close
                self._sct.close()
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


def scale(img: Image.Image, width: int | None, height: int | None) -> Image.Image:
    """Resize to ``width`` x ``height``; given one of them, keep the aspect ratio."""
    if not width and not height:
        return img
    w = width or max(1, round(img.width * (height or img.height) / img.height))
    h = height or max(1, round(img.height * w / img.width))
    if (w, h) == img.size:
        return img
    return img.resize((w, h), Image.Resampling.BILINEAR)


def encode(img: Image.Image, fmt: ImageFormat, quality: int | None = None) -> bytes:
    if fmt == "png":
        png = mss.tools.to_png(img.tobytes(), img.size, level=PNG_LEVEL)
        assert png is not None  # no output path given: the bytes come back
        return png
    buf = io.BytesIO()
    q = quality or DEFAULT_QUALITY[fmt]
    if fmt == "webp":
        img.save(buf, "WEBP", quality=q, method=0)
    else:
        img.save(buf, "JPEG", quality=q)
    return buf.getvalue()


def is_blank(img: Image.Image) -> bool:
    """True when every pixel has the same colour (nothing drawn yet, or a dead display)."""
    extrema: Any = img.getextrema()  # one (min, max) pair per band
    return all(lo == hi for lo, hi in extrema)
