"""Versioned LoRA adapters: which are loaded, which is the default, where they come from."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import fsspec

from coda.contracts.services_api import AdapterInfo, AdapterList, AdapterLoad
from coda.inference.base import ChatBackend

BASE = "base"
"""The version name of the model without adapter."""


class UnknownAdapter(KeyError):
    def __init__(self, version: str, known: list[str]) -> None:
        super().__init__(version)
        self.message = (f"adapter '{version}' is not loaded; loaded: "
                        f"{', '.join(known) if known else 'none'} (or '{BASE}')")


class AdapterConflict(ValueError):
    pass


def materialise(uri: str, cache_dir: str | Path) -> str:
    """A local directory holding the adapter at ``uri`` (copied there when remote)."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if "://" not in uri:
        return uri
    target = Path(cache_dir) / hashlib.sha256(uri.encode()).hexdigest()[:16]
    if not (target / "adapter_config.json").exists():
        fs, path = fsspec.core.url_to_fs(uri)
        target.mkdir(parents=True, exist_ok=True)
        fs.get(path.rstrip("/") + "/", str(target), recursive=True)
    return str(target)


class AdapterRegistry:
    """Adapters loaded into one backend; ``default`` is used when a request names none."""

    def __init__(self, backend: ChatBackend, cache_dir: str | Path) -> None:
        self.backend = backend
        self.cache_dir = cache_dir
        self._uris: dict[str, str] = {}
        self.default: str | None = None
        self._lock = asyncio.Lock()

    def versions(self) -> list[str]:
        return list(self._uris)

    def resolve(self, requested: str | None) -> str | None:
        """The adapter to use (``None`` = base model); raises :class:`UnknownAdapter`."""
        if requested is None:
            return self.default
        if requested == BASE:
            return None
        if requested not in self._uris:
            raise UnknownAdapter(requested, self.versions())
        return requested

    async def load(self, req: AdapterLoad) -> AdapterInfo:
        if req.version == BASE:
            raise AdapterConflict(f"'{BASE}' names the model without adapter")
        async with self._lock:
            known = self._uris.get(req.version)
            if known is not None and known != req.uri:
                raise AdapterConflict(f"adapter '{req.version}' is already loaded from {known}; "
                                      "delete it first or use a new version")
            if known is None:
                path = await asyncio.to_thread(materialise, req.uri, self.cache_dir)
                await self.backend.load_adapter(req.version, path)
                self._uris[req.version] = req.uri
            if req.make_default:
                self.default = req.version
        return self.info(req.version)

    async def unload(self, version: str) -> None:
        async with self._lock:
            if version not in self._uris:
                raise UnknownAdapter(version, self.versions())
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
