"""Screenshot images, shared by the guest agent that takes them (:mod:`worker.guest.capture`)
and the guest client that scales OSWorld's server's and tells a blank screen
(:mod:`worker.providers.client`): scaling, encoding (PNG unfiltered with ISA-L's fast deflate,
WebP, JPEG) and the blank-screen test.

OSWorld's server saves a PNG with Pillow's defaults (adaptive filters, zlib level 6: most of a
screenshot's time). Here the PNG is written unfiltered with ISA-L's deflate (``isal``, level 1:
about ten times faster than zlib's level 1 for a similar size).
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any

from isal import isal_zlib
from PIL import Image

from coda.contracts.desktop import ImageFormat

PNG_LEVEL = 1  # ISA-L levels are 0-3; 1 is its fast general-purpose one
DEFAULT_QUALITY = {"webp": 80, "jpeg": 85}


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
        return png_rgb(img.tobytes(), img.width, img.height)
    buf = io.BytesIO()
    q = quality or DEFAULT_QUALITY[fmt]
    if fmt == "webp":
        img.save(buf, "WEBP", quality=q, method=0)
    else:
        img.save(buf, "JPEG", quality=q)
    return buf.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_rgb(rgb: bytes, width: int, height: int) -> bytes:
    """An 8-bit RGB PNG of ``rgb`` (rows top to bottom), every row unfiltered (filter 0)."""
    stride = width * 3
    rows = b"".join(b"\x00" + rgb[y * stride:(y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", isal_zlib.compress(rows, PNG_LEVEL)) + _chunk(b"IEND", b""))


def is_blank(img: Image.Image) -> bool:
    """True when every pixel has the same colour (nothing drawn yet, or a dead display)."""
    extrema: Any = img.getextrema()  # one (min, max) pair per band
    return all(lo == hi for lo, hi in extrema)
