"""Subsampling of long trajectories, and the screenshots of the selected frames at the two
resolutions the judge shows them."""

from __future__ import annotations

from PIL import Image

from coda.imagerefs import CheckedImage
from coda.inference.images import bound_pixels, encode_data_url


def select_frames(n_steps: int, max_frames: int) -> list[int]:
    """0-based indices of the steps to show (all when ``n_steps <= max_frames``).

    The first and the last step are always kept; the other ``max_frames - 2`` are spread
    evenly over the middle. Indices stay the original ones, so labels remain "step i+1".
    """
    if n_steps < 0:
        raise ValueError("n_steps must be >= 0")
    if max_frames < 2:
        raise ValueError("max_frames must be >= 2")
    if n_steps <= max_frames:
        return list(range(n_steps))
    middle = max_frames - 2
    span = n_steps - 2  # candidates 1 .. n_steps-2
    picked = [1 + (2 * k + 1) * span // (2 * middle) for k in range(middle)]
    return [0, *picked, n_steps - 1]


def fit_within(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """Downscale (aspect kept) to fit inside ``size`` = (width, height); never upscale."""
    w, h = size
    if image.width <= w and image.height <= h:
        return image
    scale = min(w / image.width, h / image.height)
    new = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(new, Image.Resampling.BICUBIC)


def high_url(checked: CheckedImage, max_pixels: int | None) -> str:
    """The screenshot as sent (re-encoded only when ``max_pixels`` makes it smaller)."""
    bounded = bound_pixels(checked.image, max_pixels)
    if bounded is checked.image:
        return encode_data_url(checked.data)
    return encode_data_url(bounded.convert("RGB"), "PNG")


def low_url(checked: CheckedImage, size: tuple[int, int], max_pixels: int | None = None) -> str:
    """The first pass's screenshot: within ``size``, and never larger than ``max_pixels``."""
    low = fit_within(checked.image.convert("RGB"), size)
    return encode_data_url(bound_pixels(low, max_pixels), "PNG")
