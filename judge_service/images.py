"""Screenshots of a judge request: read (inline or from the artifact store) and rescale."""

from __future__ import annotations

import asyncio

from PIL import Image

from coda.contracts.services_api import ImageRef
from coda.imagerefs import FieldPath, ImageRefError, decode_image_ref, open_image, ref_field
from coda.inference.images import bound_pixels, encode_data_url

ImageError = ImageRefError


def _decode(image: ImageRef, field: FieldPath, artifacts_url: str) -> Image.Image:
    data = decode_image_ref(image, field, artifacts_url)
    return open_image(data, ref_field(image, field)).convert("RGB")


async def load_image(image: ImageRef, field: FieldPath, artifacts_url: str) -> Image.Image:
    """Decode ``image`` (base64, a store key under ``artifacts_url``, a URL or a path) as RGB."""
    return await asyncio.to_thread(_decode, image, field, artifacts_url)


def fit_within(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """Downscale (aspect kept) to fit inside ``size`` = (width, height); never upscale."""
    w, h = size
    if image.width <= w and image.height <= h:
        return image
    scale = min(w / image.width, h / image.height)
    new = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(new, Image.Resampling.BICUBIC)


def high_url(image: Image.Image, max_pixels: int | None) -> str:
    return encode_data_url(bound_pixels(image, max_pixels), "PNG")


def low_url(image: Image.Image, size: tuple[int, int]) -> str:
    return encode_data_url(fit_within(image, size), "PNG")
