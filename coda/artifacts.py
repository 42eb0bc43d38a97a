"""Content-addressed artifact store over fsspec (local directory by default, S3/MinIO, ...).

Keys look like ``sha256/ab/abcdef....png``: the same bytes always get the same key, and a key
that does not match this shape (``..``, absolute paths, other characters) is refused, so no key
can reach outside the store.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import fsspec

CONTENT_TYPES = {"image/png": "png", "image/jpeg": "jpg", "image/webp": "webp",
                 "application/json": "json"}
_EXT_TYPES = {v: k for k, v in CONTENT_TYPES.items()}
KEY_RE = re.compile(r"^sha256/[0-9a-f]{2}/[0-9a-f]{64}\.(png|jpg|webp|json)$")
_MAGIC = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg"}


class ArtifactError(ValueError):
    """A refused artifact: bad key, unsupported type or too large."""


def sniff_content_type(data: bytes) -> str | None:
    for magic, ctype in _MAGIC.items():
        if data.startswith(magic):
            return ctype
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def check_json(data: bytes) -> None:
    """Raise ArtifactError unless ``data`` is one standard JSON document in UTF-8 (no NaN or
    Infinity), as images are checked by their magic bytes."""
    try:
        json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError included
        sniffed = sniff_content_type(data)
        looks = f" (looks like {sniffed})" if sniffed else ""
        raise ArtifactError(f"bytes are not application/json{looks}: "
                            f"{str(exc)[:200] or type(exc).__name__}") from exc


def validate_key(key: str) -> str:
    if not KEY_RE.fullmatch(key):
        raise ArtifactError(f"invalid artifact key {key!r}")
    return key


def content_type_of(key: str) -> str:
    return _EXT_TYPES[validate_key(key).rsplit(".", 1)[1]]


class ArtifactStore:
    """``put`` bytes, get a key back; ``get`` bytes by key."""

    def __init__(self, url: str, *, max_bytes: int = 16 * 1024 * 1024) -> None:
        self.url = url.rstrip("/")
        self.max_bytes = max_bytes
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    def _path(self, key: str) -> str:
        return f"{self.root}/{validate_key(key)}"

    def put(self, data: bytes, content_type: str) -> str:
        if content_type not in CONTENT_TYPES:
            raise ArtifactError(
                f"content type {content_type!r} not allowed; use one of {sorted(CONTENT_TYPES)}")
        if len(data) > self.max_bytes:
            raise ArtifactError(f"artifact of {len(data)} bytes exceeds {self.max_bytes}")
        if content_type == "application/json":
            check_json(data)
        else:
            sniffed = sniff_content_type(data)
            if sniffed != content_type:
                raise ArtifactError(f"bytes are not {content_type} (looks like {sniffed})")
        digest = hashlib.sha256(data).hexdigest()
        key = f"sha256/{digest[:2]}/{digest}.{CONTENT_TYPES[content_type]}"
        path = self._path(key)
        if not self.fs.exists(path):
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            tmp = f"{path}.tmp-{digest[:8]}"
            with self.fs.open(tmp, "wb") as fh:
                fh.write(data)
            self.fs.mv(tmp, path)
        return key

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with self.fs.open(path, "rb") as fh:
                return bytes(fh.read())
        except FileNotFoundError as exc:
            raise KeyError(key) from exc

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))
