"""Screenshots given as :class:`ImageRef` -> checked image bytes; one reader for every service.

An :class:`ImageRef` is inline base64 (optionally a ``data:`` URL) or a ``ref``: a key of the
content-addressed artifact store (validated by :class:`~coda.artifacts.ArtifactStore`, so no
key reaches outside the store), a remote fsspec URL (http, s3, gs, ...), or a local path /
``file://`` URL inside the artifact store's directory. A request can never make a service
read an arbitrary local file.
Every failure is an :class:`ImageRefError` naming the request field, ending in ``b64``/``ref``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import os

import fsspec
from PIL import Image

from coda.artifacts import ArtifactStore, sniff_content_type
from coda.contracts.services_api import ImageRef

FieldPath = tuple[str | int, ...]
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp"})
REMOTE_SCHEMES = frozenset({"http", "https", "s3", "s3a", "gs", "gcs", "az", "abfs", "abfss",
                            "memory"})


class RefNotAllowed(ValueError):
    """A ref pointing outside what a service may read."""


def _local_root(artifacts_url: str) -> str | None:
    base = artifacts_url[len("file://"):] if artifacts_url.startswith("file://") else artifacts_url
    return None if "://" in base else os.path.realpath(base)


def _check_local(path: str, artifacts_url: str) -> str:
    root = _local_root(artifacts_url)
    real = os.path.realpath(path)
    if root is None or not (real == root or real.startswith(root + os.sep)):
        raise RefNotAllowed(f"local paths are only read inside the artifact store ({root})")
    return real


class ImageRefError(ValueError):
    """An image that cannot be used; ``field`` is its location in the request and ``missing``
    says the ref named nothing (the store or URL has no such object)."""

    def __init__(self, field: FieldPath, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.field = field
        self.missing = missing


def ref_field(image: ImageRef, field: FieldPath) -> FieldPath:
    """``field`` extended by the part of ``image`` that is set (``"b64"`` or ``"ref"``)."""
    return (*field, "b64" if image.b64 is not None else "ref")


def read_ref(ref: str, artifacts_url: str) -> bytes:
    """Bytes of ``ref``: a remote URL, a local path or ``file://`` URL inside the store's
    directory (read with fsspec), or else a key of the artifact store at ``artifacts_url``. A
    missing object is :class:`FileNotFoundError`; a malformed key is
    :class:`~coda.artifacts.ArtifactError`; anything else :class:`RefNotAllowed`."""
    if "://" in ref:
        scheme = ref.split("://", 1)[0].lower()
        if scheme == "file":
            ref = _check_local(ref[len("file://"):], artifacts_url)
        elif scheme not in REMOTE_SCHEMES:
            raise RefNotAllowed(f"URL scheme {scheme!r} is not allowed")
    elif ref.startswith("/"):
        ref = _check_local(ref, artifacts_url)
    if "://" in ref or ref.startswith("/"):
        with fsspec.open(ref, "rb") as fh:
            data: bytes = fh.read()
        return data
    try:
        return ArtifactStore(artifacts_url).get(ref)
    except KeyError as exc:
        raise FileNotFoundError(f"no artifact {ref!r} in {artifacts_url}") from exc


def decode_image_ref(image: ImageRef, field: FieldPath, artifacts_url: str) -> bytes:
    """The bytes of ``image`` (blocking), checked to be PNG, JPEG or WebP."""
    where = ref_field(image, field)
    if image.b64 is not None:
        payload = image.b64.split(",", 1)[1] if image.b64.startswith("data:") else image.b64
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ImageRefError(where, f"not valid base64: {exc}") from exc
    else:
        assert image.ref is not None  # ImageRef guarantees exactly one
        try:
            data = read_ref(image.ref, artifacts_url)
        except FileNotFoundError as exc:
            raise ImageRefError(where, f"not found: {exc}", missing=True) from exc
        except Exception as exc:  # bad keys and any fsspec backend error become field errors
            raise ImageRefError(where, f"cannot read {image.ref!r}: {exc}") from exc
    if sniff_content_type(data) not in IMAGE_TYPES:
        raise ImageRefError(where, "not a PNG, JPEG or WebP image")
    return data


async def load_image_ref(image: ImageRef, field: FieldPath, artifacts_url: str) -> bytes:
    """:func:`decode_image_ref` off the event loop."""
    return await asyncio.to_thread(decode_image_ref, image, field, artifacts_url)


def open_image(data: bytes, field: FieldPath) -> Image.Image:
    """Decode checked image bytes with PIL (fully loaded); a corrupt image is a field error."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (OSError, Image.DecompressionBombError) as exc:
        raise ImageRefError(field, f"not a decodable image: {exc}") from exc
    return image
