"""Versioned LoRA adapters: which are loaded, which is the default, where they come from.

An adapter ``uri`` is one of
* a folder of the artifact store, relative to its base URL (``adapters/run1/step-10``): it is
  copied from the store (local or remote, through the store's configured URL only) into the
  adapter cache, with a size bound, and loaded from there;
* an absolute local path (or ``file://`` URL) inside one of the ``adapter_roots`` the
  operator configured: loaded in place.
Anything else (``http://``, ``s3://``, ``local://``, paths elsewhere) is refused with 422.
A copy is written under a temporary name and published only when complete; a load that fails
removes what it copied, so a failed load leaves nothing in the cache. Messages never show
server paths.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from coda.contracts.services_api import BASE_VERSION, AdapterInfo, AdapterList, AdapterLoad
from coda.imagerefs import ArtifactStoreUnavailable, ReadOnlyStore
from coda.inference.base import AdapterNotFound, ChatBackend
from coda.logging import get_logger
from coda.modelservice.errors import Conflict, NotFound
from coda.service import FieldError

log = get_logger("planner_service.adapters")

BASE = BASE_VERSION
"""The version name of the model without adapter (the one name, from the contracts)."""
URI_LOC = ("body", "uri")
_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
MAX_SEGMENTS = 16
MAX_FILES = 256


def unknown_adapter(version: str, known: list[str]) -> NotFound:
    return NotFound(f"adapter '{version}' is not loaded; loaded: "
                    f"{', '.join(known) if known else 'none'} (or '{BASE}')")


@dataclass(frozen=True)
class Location:
    """Where an adapter is: ``in_store`` (a folder relative to the store) or ``path``."""

    in_store: str | None = None
    path: str | None = None


def locate(uri: str, roots: list[str]) -> Location:
    """Check ``uri`` against the two allowed forms (422 naming ``uri`` otherwise)."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if "://" in uri:
        raise FieldError(URI_LOC, "adapters are read from the artifact store (a folder relative "
                                  "to it) or from an adapter root (an absolute path); URLs are "
                                  "not fetched")
    if uri.startswith("/"):
        real = os.path.realpath(uri)
        for root in roots:
            top = os.path.realpath(root)
            if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
                return Location(path=real)
        raise FieldError(URI_LOC, "this path is not inside an adapter root of this service")
    segments = uri.strip("/").split("/")
    if len(segments) > MAX_SEGMENTS or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise FieldError(URI_LOC, "a folder of the artifact store: up to 16 '/'-separated names "
                                  "of letters, digits and '._-' (no '..')")
    return Location(in_store="/".join(segments))


def copy_from_store(store: ReadOnlyStore, folder: str, cache_dir: str | Path,
                    max_bytes: int) -> tuple[Path, bool]:
    """The local copy of ``folder`` of the store (made now unless complete) and whether this
    call made it. Blocking."""
    cache = Path(cache_dir)
    target = cache / hashlib.sha256(f"{store.url}\n{folder}".encode()).hexdigest()[:24]
    if (target / ".complete").is_file():
        return target, False
    source = f"{store.root}/{folder}"
    try:
        listing = store.fs.find(source, detail=True)
    except FileNotFoundError:
        listing = {}
    except Exception as exc:  # noqa: BLE001 - any fsspec backend's error: the store's, a 503
        log.warning("planner.adapter_list_failed", error=f"{type(exc).__name__}: {exc}")
        raise ArtifactStoreUnavailable(
            f"the artifact store could not be read ({type(exc).__name__})") from None
    files = {p: info for p, info in listing.items() if info.get("type") == "file"}
    if not files:
        raise AdapterNotFound("no adapter in this folder of the artifact store")
    if len(files) > MAX_FILES:
        raise FieldError(URI_LOC, f"the adapter folder has more than {MAX_FILES} files")
    total = sum(int(info.get("size") or 0) for info in files.values())
    if total > max_bytes:
        raise FieldError(URI_LOC, f"the adapter is larger than {max_bytes} bytes", status_code=413)
    prefix = source.rstrip("/") + "/"
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=".partial-"))
    try:
        for path in files:
            name = path[len(prefix):] if path.startswith(prefix) else ""
            if not name or any(not _SEGMENT.fullmatch(s) for s in name.split("/")):
                raise FieldError(URI_LOC, "the adapter folder holds a file with an unusable name")
            if store.local and not _inside(path, store.root):
                raise FieldError(URI_LOC, "the adapter folder links outside the artifact store")
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            store.fs.get_file(path, str(staging / name))
        if not (staging / "adapter_config.json").is_file():
            raise AdapterNotFound("no adapter_config.json in this folder of the artifact store")
        (staging / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)  # an incomplete leftover
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target, True


def _inside(path: str, root: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real.startswith(top + os.sep)


class AdapterRegistry:
    """Adapters loaded into one backend; ``default`` is used when a request names none."""

    def __init__(self, backend: ChatBackend, store: ReadOnlyStore, cache_dir: str | Path,
                 roots: list[str], max_bytes: int) -> None:
        self.backend = backend
        self.store = store
        self.cache_dir = cache_dir
        self.roots = roots
        self.max_bytes = max_bytes
        self._uris: dict[str, str] = {}
        self.default: str | None = None
        self._lock = asyncio.Lock()

    def versions(self) -> list[str]:
        return list(self._uris)

    def resolve(self, requested: str | None) -> str | None:
        """The adapter to use (``None`` = base model); raises :class:`NotFound`."""
        if requested is None:
            return self.default
        if requested == BASE:
            return None
        if requested not in self._uris:
            raise unknown_adapter(requested, self.versions())
        return requested

    async def load(self, req: AdapterLoad) -> AdapterInfo:
        if req.version == BASE:
            raise Conflict(f"'{BASE}' names the model without adapter")
        async with self._lock:
            known = self._uris.get(req.version)
            if known is not None and known != req.uri:
                raise Conflict(f"adapter '{req.version}' is already loaded from another uri; "
                               "delete it first or use a new version")
            if known is None:
                await self._load(req.version, req.uri)
            if req.make_default:
                self.default = req.version
        return self.info(req.version)

    async def _load(self, version: str, uri: str) -> None:
        where = locate(uri, self.roots)
        created = False
        if where.in_store is not None:
            copy, created = await asyncio.to_thread(
                copy_from_store, self.store, where.in_store, self.cache_dir, self.max_bytes)
            path = str(copy)
        else:
            assert where.path is not None
            path = where.path
        try:
            await self.backend.load_adapter(version, path)
        except BaseException:
            if created:
                shutil.rmtree(path, ignore_errors=True)
            raise
        self._uris[version] = uri

    async def reload(self, version: str) -> None:
        """Load ``version`` into the backend again from where it was loaded (the backend lost
        it: a restarted vLLM); a version unloaded meanwhile is skipped."""
        async with self._lock:
            uri = self._uris.get(version)
            if uri is not None:
                await self._load(version, uri)

    def set_default(self, version: str) -> None:
        """Make a loaded version the default (raises :class:`NotFound` otherwise)."""
        if version not in self._uris:
            raise unknown_adapter(version, self.versions())
        self.default = version

    async def unload(self, version: str) -> None:
        async with self._lock:
            if version not in self._uris:
                raise unknown_adapter(version, self.versions())
            await self.backend.unload_adapter(version)
            del self._uris[version]
            if self.default == version:
                self.default = None

    def info(self, version: str) -> AdapterInfo:
        return AdapterInfo(version=version, uri=self._uris.get(version),
                           is_default=self.default == version)

    def listing(self) -> AdapterList:
        items = [AdapterInfo(version=BASE, is_default=self.default is None)]
        items += [self.info(v) for v in self._uris]
        return AdapterList(items=items)
