"""Planner versions survive a vLLM restart: the planner service pulls the current version from
the master (a real master process) and loads it into vLLM again after a kill -9."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest

from coda.clients.master import MasterClient
from coda.contracts.services_api import PlanResponse
from coda.contracts.training import ModelVersionCreate
from coda.logging import get_logger
from tests.fixtures.master import MasterProcess
from tests.fixtures.services import TOKENS, Store, asgi_client
from tests.fixtures.waiting import wait_for_async
from tests.vllm.conftest import SERVED_NAME, VllmServer
from tests.vllm.test_services import plan_request

pytestmark = pytest.mark.vllm
log = get_logger("tests.vllm.versions")
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "serving.json"
WAIT_S = 300.0


def publish(store: Store, master: MasterProcess, name: str) -> Callable[[], Awaitable[None]]:
    """As the trainer publishes: the adapter written into the store, then registered (current)
    with the master; the trainer's push to the planners is left out on purpose."""
    async def go() -> None:
        target = store.root / "adapters" / name
        shutil.copytree(store.root / store.adapter_folder, target)
        async with MasterClient(master.url, token=master.admin_token) as m:
            await m.register_version(ModelVersionCreate(
                name=name, base_model="tiny", adapter_uri=str(target), make_current=True))
    return go


async def default_version(planner: httpx.AsyncClient) -> str | None:
    resp = await planner.post("/v1/plan", json=plan_request(1))
    if resp.status_code != 200:
        return None
    return PlanResponse.model_validate(resp.json()).plans[0].version


async def served(url: str) -> set[str]:
    async with httpx.AsyncClient(timeout=30) as http:
        return {m["id"] for m in (await http.get(f"{url}/v1/models")).json()["data"]}


def record(key: str, value: float) -> None:
    """With ``CODA_RECORD_RESULTS=1``, add a figure to benchmarks/results/serving.json (beside
    the serving benchmark's); otherwise the figure is only logged."""
    if os.environ.get("CODA_RECORD_RESULTS") != "1":
        return
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[key] = round(value, 1)
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")


async def test_the_current_version_survives_a_vllm_kill(
        vllm_server: VllmServer, master: MasterProcess, service_store: Store,
        tmp_path: Path) -> None:
    from planner_service.app import create_app
    from planner_service.settings import PlannerSettings

    settings = PlannerSettings(
        backend="openai", base_url=f"{vllm_server.url}/v1", model=SERVED_NAME,
        backend_retries=1, backend_timeout_s=60, artifacts_url=str(service_store.root),
        adapter_cache_dir=str(tmp_path / "adapter-cache"), master_url=master.url,
        master_token=master.admin_token, version_poll_s=1.0, keep_versions=2, **TOKENS.env())
    run = f"pull-{int(time.time())}"
    v1, v2, v3 = (f"{run}-{i:06d}" for i in (1, 2, 3))
    async with asgi_client(create_app(settings)) as planner:
        assert await default_version(planner) == "base"  # nothing published yet
        await publish(service_store, master, v1)()
        await wait_for_async(lambda: _is(default_version(planner), v1), f"plans by {v1}",
                             WAIT_S, interval=0.5)

        # vLLM dies (its runtime LoRAs with it); the trainer publishes v2 meanwhile
        killed = time.monotonic()
        vllm_server.kill()
        await publish(service_store, master, v2)()
        down = await planner.post("/v1/plan", json={**plan_request(1), "adapter": v2})
        assert down.status_code == 503, down.text  # typed and retryable, not a 404
        vllm_server.start()
        up = time.monotonic()
        assert not {v1, v2} & await served(vllm_server.url)  # a fresh vLLM has none

        # a group job naming the current version at once: loaded again on demand, not a 404
        first = await planner.post("/v1/plan", json={**plan_request(2), "adapter": v2})
        assert first.status_code == 200, first.text
        assert {p.version for p in PlanResponse.model_validate(first.json()).plans} == {v2}
        await wait_for_async(lambda: _is(default_version(planner), v2), f"plans by {v2}",
                             WAIT_S, interval=0.5)
        recovered = time.monotonic()
        await wait_for_async(lambda: _has(served(vllm_server.url), {v1, v2}), "v1, v2 in vLLM",
                             WAIT_S, interval=0.5)
        older = await planner.post("/v1/plan", json={**plan_request(1), "adapter": v1})
        assert older.status_code == 200, older.text  # the version kept before the current

        # the next version is pulled by the poll alone; the oldest leaves (keep_versions=2)
        await publish(service_store, master, v3)()
        await wait_for_async(lambda: _is(default_version(planner), v3), f"plans by {v3}",
                             WAIT_S, interval=0.5)
        listing = (await planner.get("/v1/adapters")).json()["items"]
        assert {a["version"] for a in listing} == {"base", v2, v3}
    after_restart, after_kill = recovered - up, recovered - killed
    log.info("tests.version_recovered", after_restart_s=round(after_restart, 1),
             after_kill_s=round(after_kill, 1))
    record("version_recovery_s", after_restart)
    record("version_recovery_from_kill_s", after_kill)


async def _is(value: Awaitable[str | None], expected: str) -> bool:
    return await value == expected


async def _has(value: Awaitable[set[str]], expected: set[str]) -> bool:
    return expected <= await value
