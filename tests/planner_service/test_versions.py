"""The pure parts of the planner's pull of versions from the master (the pull itself runs
against vLLM and a real master in tests/vllm/test_versions.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from coda.contracts.training import ModelRole, ModelVersion
from planner_service.versions import store_relative, wanted


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
