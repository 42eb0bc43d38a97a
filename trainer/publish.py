"""New planner versions: write the adapter to the store, register it with the master, and have
the planner services load it one replica at a time (sampling never stops: a replica keeps
serving its current default until the new adapter is loaded, and the others are untouched
meanwhile)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import httpx

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.clients.planner import PlannerClient
from coda.contracts.training import ModelRole, ModelVersion, ModelVersionCreate
from coda.logging import get_logger

log = get_logger("trainer.publish")

LAST_FILE = "adapter_config.json"
"""Written last: a reader that sees it sees a complete adapter (the planner checks for it)."""


def version_name(run_name: str, update: int) -> str:
    return f"{run_name}-{update:06d}"


def write_model_dir(save: Any, root_url: str, version: str) -> str:
    """Save with ``save(local_dir)`` (``save_pretrained``) and copy to ``<root_url>/<version>``;
    returns that URL (a plain path for local stores)."""
    target = f"{root_url.rstrip('/')}/{version}"
    fs, path = fsspec.core.url_to_fs(target)
    with tempfile.TemporaryDirectory(prefix="coda-publish-") as tmp:
        save(tmp)
        files = sorted(p for p in Path(tmp).rglob("*") if p.is_file())
        files.sort(key=lambda p: p.name == LAST_FILE)
        fs.makedirs(path, exist_ok=True)
        for f in files:
            dest = f"{path}/{f.relative_to(tmp).as_posix()}"
            fs.makedirs(dest.rsplit("/", 1)[0], exist_ok=True)
            fs.put_file(str(f), dest)
    return target[len("file://"):] if target.startswith("file://") else target


async def register(master: MasterClient, spec: ModelVersionCreate) -> ModelVersion | None:
    """Register a version; one that already exists (a retry after a crash) is fine."""
    try:
        return await master.register_version(spec)
    except ServiceError as exc:
        if exc.status != 409:
            raise
        log.info("trainer.version_already_registered", version=spec.name)
        return None


@dataclass
class Rollout:
    """How a version reached the planner services."""

    loaded: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unloaded: list[str] = field(default_factory=list)


async def roll_out(urls: list[str], version: str, uri: str, *, keep: list[str],
                   run_prefix: str, token: str | None = None,
                   timeout_s: float = 300.0) -> Rollout:
    """Load ``version`` as the default on each planner, one after the other; then unload this
    run's versions not in ``keep``. A replica that fails keeps serving its previous version."""
    result = Rollout()
    for url in urls:
        async with PlannerClient(url, token=token, timeout=timeout_s) as planner:
            try:
                await planner.load_adapter(version, uri, make_default=True)
            except (ServiceError, httpx.HTTPError) as exc:  # a broken replica: not the others
                log.warning("trainer.adapter_load_failed", planner=url, version=version,
                            error=str(exc))
                result.failed[url] = str(exc)
                continue
            result.loaded.append(url)
            try:
                listing = await planner.list_adapters()
                for item in listing.items:
                    if item.version.startswith(run_prefix) and item.version not in keep \
                            and not item.is_default:
                        await planner.unload_adapter(item.version)
                        result.unloaded.append(f"{url}:{item.version}")
            except (ServiceError, httpx.HTTPError) as exc:
                log.warning("trainer.adapter_unload_failed", planner=url, error=str(exc))
    log.info("trainer.version_rolled_out", version=version, loaded=len(result.loaded),
             failed=len(result.failed))
    return result


def version_spec(name: str, *, base_model: str, adapter_uri: str | None, parent: str | None,
                 metrics: dict[str, float]) -> ModelVersionCreate:
    return ModelVersionCreate(name=name, role=ModelRole.PLANNER, base_model=base_model,
                              adapter_uri=adapter_uri, parent=parent, make_current=True,
                              metrics=metrics)
