"""Screenshots given as :class:`ImageRef` -> data URLs the backends accept.

Reading and checking live in :mod:`coda.imagerefs`; these names are what the planner uses.
"""

from __future__ import annotations

from coda.imagerefs import ImageRefError, load_image_ref
from coda.inference.images import encode_data_url

ImageError = ImageRefError
load_image = load_image_ref


def data_url(data: bytes) -> str:
    """A ``data:`` URL for checked PNG/JPEG/WebP bytes."""
    return encode_data_url(data)


__all__ = ["ImageError", "data_url", "load_image"]
