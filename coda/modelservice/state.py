"""The one state/lifespan shape of the model services.

A :class:`ModelState` holds the settings, the screenshot reader and the named backends. The
backends described by specs load in the background after start-up (``/readyz`` says 503 and
the model routes answer 503 with ``Retry-After`` meanwhile; a load that fails is reported by
both with its real error, an ``ImportError`` included); backends handed in (tests, embedding)
are used as they are and not closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from coda.imagerefs import ScreenshotReader
from coda.inference.base import ChatBackend
from coda.inference.spec import BackendSpec
from coda.logging import get_logger
from coda.modelservice.errors import Unavailable
from coda.modelservice.settings import ModelServiceSettings

log = get_logger("coda.modelservice")


class ModelState:
    """Settings, screenshot reader and backends of one model service."""

    def __init__(self, settings: ModelServiceSettings, specs: Mapping[str, BackendSpec],
                 backends: Mapping[str, ChatBackend] | None = None) -> None:
        self.settings = settings
        self.reader = ScreenshotReader(settings.artifacts_url, settings.image_limits(),
                                       timeout_s=settings.artifact_timeout_s)
        self.specs = dict(specs)
        self.owned = backends is None
        self.backends: dict[str, ChatBackend] = dict(backends or {})
        self.names = list(self.backends) if backends is not None else list(self.specs)
        self.load_error: str | None = None
        self._loader: asyncio.Task[None] | None = None

    @property
    def loaded(self) -> bool:
        return bool(self.names) and all(n in self.backends for n in self.names)

    async def start(self) -> None:
        if self.loaded:
            await self.on_loaded()
        else:
            self._loader = asyncio.create_task(self._load())

    async def _load(self) -> None:
        from coda.inference.factory import make_backend  # torch only when a model loads here

        try:
            for name, spec in self.specs.items():
                self.backends[name] = await asyncio.to_thread(make_backend, spec)
                log.info("model.backend_ready", name=name, backend=spec.backend, model=spec.model)
            await self.on_loaded()
        except Exception as exc:  # reported by /readyz and the routes, never a crash
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("model.backend_failed", error=self.load_error, exc_info=True)

    async def on_loaded(self) -> None:
        """Called once every backend is there (subclasses set up what depends on them)."""

    async def stop(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
            await asyncio.gather(self._loader, return_exceptions=True)
        if self.owned:
            for backend in self.backends.values():
                await backend.aclose()

    def require_loaded(self) -> None:
        """Raise :class:`Unavailable` (503) until every backend has loaded."""
        if not self.loaded:
            raise Unavailable(f"model not loaded: {self.load_error}" if self.load_error
                              else "model loading, retry later")

    def backend(self, name: str | None = None) -> ChatBackend:
        """The backend ``name`` (the first one by default), once loaded."""
        self.require_loaded()
        return self.backends[name if name is not None else self.names[0]]

    async def readiness(self) -> dict[str, Any]:
        """``/readyz`` detail; raises while loading or after a failed load."""
        if not self.loaded:
            raise RuntimeError(self.load_error or "model loading")
        return {name: await b.ready() for name, b in self.backends.items()}
