"""Screenshots given as :class:`ImageRef` -> checked images; ONE reader and ONE rule for the
planner, executor and judge.

* A ``ref`` is a key of the artifact store the service is configured with
  (``sha256/ab/<64 hex>.png``), read from that store only: a local store's file is resolved
  (symlinks included) and must lie inside the store's directory; a remote store (``s3://...``,
  ``http(s)://...``) is reached only under its configured base URL, without following
  redirects. A ref is never a URL or a path of its own.
* ``b64`` is the image inline, base64, optionally as ``data:image/png|jpeg|webp;base64,...``.
* The rule (:func:`check_image`): PNG, JPEG or WebP by their magic bytes; the size read from
  the header BEFORE any pixel is decoded; more than :attr:`ImageLimits.max_pixels` pixels is
  413, an aspect ratio beyond :attr:`ImageLimits.max_aspect_ratio` 422, then the image is
  decoded and one that does not decode is 422.

Every failure is an :class:`ImageRefError` naming the request field (ending in ``b64`` or
``ref``) with a message that shows no server path or store URL; a store that cannot be reached
is :class:`ArtifactStoreUnavailable`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from PIL import Image

from coda.artifacts import ArtifactError, ArtifactStore, sniff_content_type
from coda.contracts.services_api import ImageRef
from coda.logging import get_logger

log = get_logger(__name__)

FieldPath = tuple[str | int, ...]
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp"})
_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}
_DATA_URL = re.compile(r"^data:image/(png|jpeg|jpg|webp);base64,", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class ImageLimits:
    """What a service accepts as a screenshot (settings ``max_image_pixels`` etc.)."""

    max_pixels: int = 16_777_216
    """4096 x 4096; well below Pillow's decompression-bomb threshold (89,478,485)."""
    max_aspect_ratio: float = 50.0
    """Long side / short side; Qwen2.5-VL's processor refuses 200 and more."""
    max_bytes: int = 64 * 1024 * 1024
    """Encoded bytes of one image read from the store."""


class ImageRefError(ValueError):
    """An image that cannot be used; ``field`` is its location in the request, ``status`` the
    HTTP status it deserves (422, or 413 for an image above the limits) and ``missing`` says
    that the store has no such key."""

    def __init__(self, field: FieldPath, message: str, *, status: int = 422,
                 missing: bool = False) -> None:
        super().__init__(message)
        self.field = field
        self.status = status
        self.missing = missing


class ArtifactStoreUnavailable(RuntimeError):
    """The configured artifact store failed (network, permissions): not the request's fault."""


@dataclass(frozen=True)
class CheckedImage:
    """Image bytes that passed :func:`check_image`, and the decoded image."""

    data: bytes
    image: Image.Image
    mime: str

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size


def ref_field(image: ImageRef, field: FieldPath) -> FieldPath:
    """``field`` extended by the part of ``image`` that is set (``"b64"`` or ``"ref"``)."""
    return (*field, "b64" if image.b64 is not None else "ref")


def decode_b64(value: str, field: FieldPath) -> bytes:
    """Inline base64, plain or as a ``data:image/...;base64,`` URL."""
    payload = value
    if value[:5].lower() == "data:":
        m = _DATA_URL.match(value)
        if m is None:
            raise ImageRefError(field, "a data URL must look like "
                                       "'data:image/png;base64,<base64>' (png, jpeg or webp)")
        payload = value[m.end():]
    try:
        return base64.b64decode(_WHITESPACE.sub("", payload), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageRefError(field, f"not valid base64: {exc}") from None


def check_image(data: bytes, field: FieldPath, limits: ImageLimits) -> CheckedImage:
    """The one rule every service applies (see the module docstring)."""
    mime = sniff_content_type(data)
    if mime not in IMAGE_TYPES:
        raise ImageRefError(field, "not a PNG, JPEG or WebP image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=[_FORMATS[mime]])  # header only
    except Image.DecompressionBombError:
        raise ImageRefError(field, f"image exceeds the limit of {limits.max_pixels} pixels",
                            status=413) from None
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for a damaged header: a 4xx
        raise ImageRefError(field, f"not a decodable image ({type(exc).__name__})") from None
    width, height = image.size
    if width * height > limits.max_pixels:
        raise ImageRefError(field, f"image of {width}x{height} pixels exceeds the limit of "
                                   f"{limits.max_pixels} pixels", status=413)
    if width < 1 or height < 1 or max(width, height) > limits.max_aspect_ratio * min(width, height):
        raise ImageRefError(field, f"image of {width}x{height} pixels: the aspect ratio must be "
                                   f"at most {limits.max_aspect_ratio:g}:1")
    try:
        image.load()
    except Exception as exc:  # noqa: BLE001 - truncated or corrupt data, many types: a 4xx
        raise ImageRefError(field, f"not a decodable image ({type(exc).__name__})") from None
    return CheckedImage(data=data, image=image, mime=mime)


def _store_options(url: str, timeout_s: float) -> dict[str, Any]:
    """fsspec options of a remote store: bounded time, and (HTTP) no redirects."""
    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    if protocol in ("http", "https"):
        import aiohttp  # an optional package: the http store needs it anyway

        return {"allow_redirects": False,
                "client_kwargs": {"timeout": aiohttp.ClientTimeout(total=timeout_s)}}
    if protocol in ("s3", "s3a"):
        return {"config_kwargs": {"connect_timeout": timeout_s, "read_timeout": timeout_s,
                                  "retries": {"max_attempts": 2}}}
    return {}


class ReadOnlyStore(ArtifactStore):
    """The artifact store at ``url``, read-only and bounded, as the services read it."""

    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        super().__init__(_local_form(url))
        options = _store_options(self.url, timeout_s)
        if options:
            self.fs, self.root = fsspec.core.url_to_fs(self.url, **options)
        self.local = isinstance(self.fs, LocalFileSystem)
        self._real_root = os.path.realpath(self.root) if self.local else None

    def read(self, key: str, field: FieldPath, max_bytes: int) -> bytes:
        """The bytes stored under ``key`` (at most ``max_bytes``)."""
        try:
            path = self._path(key)
        except ArtifactError:
            raise ImageRefError(field, "not an artifact-store key "
                                       "(sha256/<2 hex>/<64 hex>.png|jpg|webp)") from None
        try:
            if self.local:
                return self._read_local(path, field, max_bytes)
            with self.fs.open(path, "rb", **self._open_kw()) as fh:
                data = bytes(fh.read(max_bytes + 1))
        except FileNotFoundError as exc:
            if _unreachable(exc.__cause__):  # fsspec's http reports timeouts as "not found"
                raise _unavailable(exc.__cause__) from None
            raise ImageRefError(field, "no artifact with this key in the artifact store",
                                missing=True) from None
        except ImageRefError:
            raise
        except Exception as exc:  # noqa: BLE001 - any fsspec backend's error: the store's, a 503
            raise _unavailable(exc) from None
        if len(data) > max_bytes:
            raise ImageRefError(field, f"artifact larger than {max_bytes} bytes", status=413)
        return data

    def _open_kw(self) -> dict[str, Any]:
        return {"block_size": 0} if self.url.split("://", 1)[0] in ("http", "https") else {}

    def _read_local(self, path: str, field: FieldPath, max_bytes: int) -> bytes:
        assert self._real_root is not None
        real = os.path.realpath(path)
        if not real.startswith(self._real_root + os.sep):
            raise ImageRefError(field, "the artifact links outside the artifact store")
        if not os.path.isfile(real):
            raise FileNotFoundError(key_of(path))
        if os.path.getsize(real) > max_bytes:
            raise ImageRefError(field, f"artifact larger than {max_bytes} bytes", status=413)
        with open(real, "rb") as fh:
            return fh.read(max_bytes + 1)


def _unreachable(cause: BaseException | None) -> bool:
    """Whether ``cause`` is a transport failure (timeout, refused or dropped connection)."""
    if isinstance(cause, TimeoutError | ConnectionError):
        return True
    try:
        import aiohttp
    except ImportError:
        return False
    return isinstance(cause, aiohttp.ClientConnectionError)


def _unavailable(exc: BaseException | None) -> ArtifactStoreUnavailable:
    log.warning("artifacts.read_failed", error=f"{type(exc).__name__}: {exc}")
    return ArtifactStoreUnavailable(
        f"the artifact store could not be read ({type(exc).__name__})")


def key_of(path: str) -> str:
    return "/".join(path.rsplit("/", 3)[-3:])


def _local_form(url: str) -> str:
    """``file://x`` and ``x`` name the same local store; one form is kept (a plain path)."""
    return url[len("file://"):] if url.startswith("file://") else url


class ScreenshotReader:
    """Reads every :class:`ImageRef` of a request through ONE artifact store and ONE rule."""

    def __init__(self, artifacts_url: str, limits: ImageLimits | None = None, *,
                 timeout_s: float = 30.0) -> None:
        self.store = ReadOnlyStore(artifacts_url, timeout_s=timeout_s)
        self.limits = limits or ImageLimits()

    def raw(self, image: ImageRef, field: FieldPath) -> bytes:
        """The encoded bytes of ``image`` (not yet checked)."""
        where = ref_field(image, field)
        if image.b64 is not None:
            return decode_b64(image.b64, where)
        assert image.ref is not None  # ImageRef holds exactly one
        return self.store.read(image.ref, where, self.limits.max_bytes)

    def read(self, image: ImageRef, field: FieldPath) -> CheckedImage:
        """The checked, decoded image (blocking)."""
        return check_image(self.raw(image, field), ref_field(image, field), self.limits)

    async def aread(self, image: ImageRef, field: FieldPath) -> CheckedImage:
        """:meth:`read` off the event loop."""
        return await asyncio.to_thread(self.read, image, field)



def read_ref(key: str, artifacts_url: str, *, max_bytes: int = ImageLimits.max_bytes) -> bytes:
    """The bytes of the artifact ``key`` in the store at ``artifacts_url``, read as the
    services read it (for callers outside a service, e.g. the trainer's group data)."""
    return ReadOnlyStore(artifacts_url).read(key, ("ref",), max_bytes)
