"""Probes for the desktop tests (awaited with :func:`tests.fixtures.waiting.wait_for`)."""

from __future__ import annotations

import io
import json
from typing import Any

from PIL import Image

from coda.contracts.desktop import WindowInfo
from worker.providers.client import GuestClient


def window(guest: GuestClient | None, needle: str) -> WindowInfo | None:
    """The first window whose title or class contains ``needle`` (case-insensitive)."""
    n = needle.lower()
    for w in (guest.windows() if guest is not None else None) or []:
        if n in w.title.lower() or any(n in c.lower() for c in w.wm_class):
            return w
    return None


def read_json(guest: GuestClient, path: str) -> Any:
    data = guest.read_file(path)
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:  # half written
        return None


def pixel(png: bytes, x: int, y: int) -> tuple[int, int, int]:
    img = Image.open(io.BytesIO(png)).convert("RGB")
    r, g, b = img.getpixel((x, y))  # type: ignore[misc]
    return int(r), int(g), int(b)


def region(png: bytes, box: tuple[int, int, int, int]) -> bytes:
    return Image.open(io.BytesIO(png)).convert("RGB").crop(box).tobytes()
