"""The pure parts of the planner's pull of versions from the master (the pull itself runs
against vLLM and a real master in tests/vllm/test_versions.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coda.contracts.training import ModelRole, ModelVersion
from planner_service.versions import store_relative, wanted
from tests.fixtures.images import image_b64
from tests.fixtures.services import TOKENS, Store, asgi_client
from tests.fixtures.waiting import wait_for_async


def version(name: str, *, current: bool = False, adapter: bool = True) -> ModelVersion:
    return ModelVersion(name=name, role=ModelRole.PLANNER, base_model="m",
                        adapter_uri=f"/s/adapters/{name}" if adapter else None,
                        is_current=current, created_at=datetime.now(UTC))


def test_wanted_is_the_current_version_and_the_newest_before_it() -> None:
    items = [version("a"), version("b"), version("full", adapter=False), version("c"),
             version("d", current=True), version("e")]
    current, keep = wanted(items, keep=2)
    assert current is not None and current.name == "d"
    assert [v.name for v in keep] == ["c", "d"]
    assert [v.name for v in wanted(items, keep=1)[1]] == ["d"]
    assert wanted([version("a"), version("b")], keep=2) == (None, [])


def test_store_relative_maps_the_trainer_s_uri_into_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "adapters" / "v1").mkdir(parents=True)
    written = str(store / "adapters" / "v1")
    assert store_relative(written, str(store), str(store), True) == "adapters/v1"
    assert store_relative(f"file://{written}", str(store), str(store), True) == "adapters/v1"
    assert store_relative("/elsewhere/v1", str(store), str(store), True) == "/elsewhere/v1"
    assert store_relative("s3://b/p/adapters/v1", "s3://b/p", "b/p", False) == "adapters/v1"
    assert store_relative("s3://other/v1", "s3://b/p", "b/p", False) == "s3://other/v1"


async def test_a_planner_started_after_a_publish_serves_the_current_version(
        master: Any, service_store: Store, tiny_model_dir: Path, tmp_path: Path) -> None:
    """The transformers backend, a real master: a (re)started planner pulls the current
    version before it is ready, and the next version by its poll."""
    import shutil

    from coda.clients.master import MasterClient
    from coda.contracts.training import ModelVersionCreate
    from planner_service.app import create_app
    from planner_service.settings import PlannerSettings

    async def publish(name: str) -> None:
        target = service_store.root / "adapters" / name
        shutil.copytree(service_store.root / service_store.adapter_folder, target)
        async with MasterClient(master.url, token=master.admin_token) as m:
            await m.register_version(ModelVersionCreate(name=name, base_model="tiny",
                                                        adapter_uri=str(target)))

    settings = PlannerSettings(
        backend="transformers", model=str(tiny_model_dir), max_pixels=56 * 56,
        artifacts_url=str(service_store.root), adapter_cache_dir=str(tmp_path / "cache"),
        master_url=master.url, master_token=master.worker_token, version_poll_s=0.5,
        **TOKENS.env())
    body = {"instruction": "Plot sin(x)", "screenshot": {"b64": image_b64((56, 56))},
            "sampling": {"max_tokens": 2}}
    await publish("pt-000001")
    async with asgi_client(create_app(settings)) as http:
        resp = await http.post("/v1/plan", json=body)
        assert resp.status_code == 200, resp.text
        assert resp.json()["plans"][0]["version"] == "pt-000001"  # pulled before ready
        await publish("pt-000002")

        async def plans_by_the_new_version() -> bool:  # the poll picks it up
            resp = await http.post("/v1/plan", json=body)
            return bool(resp.json()["plans"][0]["version"] == "pt-000002")

        await wait_for_async(plans_by_the_new_version, "plans by pt-000002", 120, interval=0.5)
        versions = {a["version"] for a in (await http.get("/v1/adapters")).json()["items"]}
        assert versions == {"base", "pt-000001", "pt-000002"}
