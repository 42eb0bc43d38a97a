"""Planner versions pulled from the master, so that they survive restarts.

The trainer registers each planner version with the master (``POST /v1/models``) and may push it
to the planner services it knows (the fast path). A planner service that was restarted, or whose
vLLM was restarted, has lost what was pushed: with ``master_url`` set it *pulls* instead. At
start and every ``version_poll_s`` seconds it

1. reads the planner versions from the master (``GET /v1/models?role=planner``);
2. asks its backend which adapters it still serves (vLLM's ``/v1/models``) and loads again the
   ones it lost (vLLM restarted: its runtime LoRAs are gone);
3. loads the current version and the ``keep_versions - 1`` newest before it that carry an
   adapter (from the artifact store, as ``POST /v1/adapters`` does), makes the current one the
   default, and unloads the older versions the master knows of (adapters loaded by hand under
   names the master does not know are left alone).

A failed pass (master or backend unreachable) is logged and tried again at the next poll;
sampling goes on with what is loaded. :meth:`VersionSync.restore` is also called by
``POST /v1/plan`` when the backend no longer knows the adapter a request names.
"""

from __future__ import annotations

import asyncio
import os

import httpx

from coda.clients.master import MasterClient
from coda.contracts.services_api import AdapterLoad
from coda.contracts.training import ModelRole, ModelVersion
from coda.inference.base import ChatBackend
from coda.logging import get_logger
from planner_service.adapters import AdapterRegistry

log = get_logger("planner_service.versions")


def store_relative(uri: str, store_url: str, store_root: str, local: bool) -> str:
    """How the planner loads an adapter the master lists at ``uri`` (where the trainer wrote
    it): a folder relative to the artifact store when ``uri`` is inside the store, else
    ``uri`` itself (then it must be inside an adapter root, see :func:`adapters.locate`)."""
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    if local and "://" not in uri:
        top = os.path.realpath(store_root).rstrip(os.sep)
        real = os.path.realpath(uri)
        if real.startswith(top + os.sep):
            return real[len(top) + 1:]
        return uri
    base = store_url.rstrip("/")
    if uri.startswith(base + "/"):
        return uri[len(base) + 1:].strip("/")
    return uri


def wanted(versions: list[ModelVersion], keep: int) -> tuple[ModelVersion | None,
                                                              list[ModelVersion]]:
    """The current version and the versions to keep loaded: the current one and the
    ``keep - 1`` newest before it, of those carrying an adapter (oldest first)."""
    with_adapter = [v for v in versions if v.adapter_uri]
    current = next((v for v in with_adapter if v.is_current), None)
    if current is None:
        return None, []
    upto = with_adapter[:with_adapter.index(current) + 1]
    return current, upto[-keep:]


class VersionSync:
    """Keeps one planner's adapters in line with the master's planner versions."""

    def __init__(self, registry: AdapterRegistry, backend: ChatBackend, master_url: str, *,
                 token: str | None, interval_s: float, keep: int) -> None:
        self.registry = registry
        self.backend = backend
        self.interval_s = interval_s
        self.keep = keep
        self.master = MasterClient(master_url, token=token, timeout=30.0, retries=1)
        self.current: str | None = None
        self._known: set[str] = set()
        """Versions the master listed: only these are unloaded when they fall out of the window."""
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="planner-version-sync")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.master.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the poll loop's top: logged, retried
                log.warning("planner.version_sync_failed", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(self.interval_s)

    async def sync(self) -> None:
        """One pass: restore lost adapters, load the wanted versions, unload the old ones
        (one pass at a time; a caller arriving during a pass waits for the next one)."""
        async with self._lock:
            await self._sync()

    async def _sync(self) -> None:
        listing = await self.master.list_versions(ModelRole.PLANNER)
        current, keep = wanted(listing.items, self.keep)
        self._known.update(v.name for v in listing.items)
        await self.restore()
        store = self.registry.store
        for v in keep:
            assert v.adapter_uri is not None
            if v.name not in self.registry.versions():
                uri = store_relative(v.adapter_uri, store.url, store.root, store.local)
                await self.registry.load(AdapterLoad(version=v.name, uri=uri))
                log.info("planner.version_pulled", version=v.name)
        if current is not None and self.registry.default != current.name:
            self.registry.set_default(current.name)
        names = {v.name for v in keep}
        for old in self.registry.versions():
            if old in self._known and old not in names and old != self.registry.default:
                await self.registry.unload(old)
                log.info("planner.version_dropped", version=old)
        if current is not None and current.name != self.current:
            self.current = current.name
            log.info("planner.version_current", version=current.name)

    async def restore(self) -> list[str]:
        return await restore_lost(self.registry, self.backend)


async def restore_lost(registry: AdapterRegistry, backend: ChatBackend) -> list[str]:
    """Load again the adapters the backend lost (a restarted vLLM); returns their names."""
    served = await served_adapters(backend)
    if served is None:
        return []
    lost = [v for v in registry.versions() if v not in served]
    for version in lost:
        await registry.reload(version)
    if lost:
        log.info("planner.adapters_restored", versions=lost)
    return lost


async def served_adapters(backend: ChatBackend) -> set[str] | None:
    """The names the backend's server serves (vLLM: ``/v1/models``, where runtime LoRAs are
    listed); None for a backend that holds its adapters itself (transformers, in process)."""
    if backend.name != "openai":
        return None
    info = await backend.ready()
    served = info.get("served")
    return set(served) if isinstance(served, list) else None


async def stop_quietly(sync: VersionSync | None) -> None:
    """Stop the poll at shutdown; a master client that fails to close is logged."""
    if sync is not None:
        try:
            await sync.stop()
        except (httpx.HTTPError, OSError, RuntimeError) as exc:
            log.info("planner.version_sync_stop_failed", error=f"{type(exc).__name__}: {exc}")
