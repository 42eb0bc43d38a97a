"""Images in OpenAI chat messages: decode parts to PIL, encode PIL/bytes to data URLs, bound size.

An OpenAI image part is ``{"type": "image_url", "image_url": {"url": URL}}``; ``URL`` is a
``data:image/...;base64,...`` URL, a local path or a ``file://`` URL. Nothing here reaches the
network: the services resolve screenshots (:mod:`coda.imagerefs`) and hand data URLs on.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
from typing import Any

import fsspec
from PIL import Image

_DATA_PREFIX = "data:"


def decode_image(url: str) -> Image.Image:
    """Load an image from a ``data:`` URL, a local path or a ``file://`` URL, as RGB."""
    if url.startswith(_DATA_PREFIX):
        raw = _decode_data_url(url)
    elif "://" in url and not url.startswith("file://"):
        raise ValueError("image_url: only data: URLs, local paths and file:// URLs are read")
    else:
        try:
            with fsspec.open(url, "rb") as fh:
                raw = fh.read()
        except (OSError, ValueError, ImportError) as exc:
            raise ValueError(f"image_url: cannot read {url[:200]!r}: {exc}") from exc
    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise ValueError(f"image_url: not a decodable image ({url[:60]!r}...): {exc}") from exc
    return image.convert("RGB")


def _decode_data_url(url: str) -> bytes:
    header, sep, payload = url.partition(",")
    if not sep or ";base64" not in header:
        raise ValueError("image_url: data URL must be 'data:image/<fmt>;base64,<payload>'")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"image_url: invalid base64 payload: {exc}") from exc


def part_url(part: dict[str, Any]) -> str:
    """The URL of an OpenAI image part (``image_url`` as an object or a bare string)."""
    value = part.get("image_url")
    if isinstance(value, dict):
        value = value.get("url")
    if not isinstance(value, str) or not value:
        raise ValueError("image_url.url: missing or not a string")
    return value


def decode_part(part: dict[str, Any]) -> Image.Image:
    """Decode an OpenAI image part; a ready PIL image under ``image`` is passed through."""
    image = part.get("image")
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    return decode_image(part_url(part))


def encode_data_url(image: Image.Image | bytes, fmt: str = "PNG") -> str:
    """A base64 ``data:`` URL for a PIL image (encoded as ``fmt``) or already-encoded bytes."""
    if isinstance(image, bytes | bytearray):
        raw = bytes(image)
        mime = _sniff_mime(raw)
    else:
        buf = io.BytesIO()
        fmt = fmt.upper()
        to_save = image.convert("RGB") if fmt == "JPEG" and image.mode != "RGB" else image
        to_save.save(buf, format=fmt)
        raw = buf.getvalue()
        mime = f"image/{'jpeg' if fmt in ('JPG', 'JPEG') else fmt.lower()}"
    return f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}"


def _sniff_mime(raw: bytes) -> str:
    if raw.startswith(b"\x89PNG"):
        return "image/png"
    if raw.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    raise ValueError("image: bytes are neither PNG, JPEG nor WEBP")


def image_part(image: Image.Image | bytes, fmt: str = "PNG") -> dict[str, Any]:
    """An OpenAI ``image_url`` content part carrying ``image`` as a data URL."""
    return {"type": "image_url", "image_url": {"url": encode_data_url(image, fmt)}}


def bounded_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The largest (w, h) with the same aspect ratio and ``w * h <= max_pixels``."""
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive, got {max_pixels}")
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    w, h = max(1, math.floor(width * scale)), max(1, math.floor(height * scale))
    while w * h > max_pixels:  # floating point edge cases
        if w >= h:
            w -= 1
        else:
            h -= 1
    return w, h


def bound_pixels(image: Image.Image, max_pixels: int | None) -> Image.Image:
    """Downscale ``image`` (aspect preserved) so it has at most ``max_pixels`` pixels."""
    if max_pixels is None:
        return image
    size = bounded_size(image.width, image.height, max_pixels)
    if size == (image.width, image.height):
        return image
    return image.resize(size, Image.Resampling.BICUBIC)
