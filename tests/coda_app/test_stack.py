"""`coda up`'s pure parts: what serves each role, the demo tasks, the live view's figures."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from coda.contracts.master_api import StatusReport
from coda.contracts.records import Batch, BatchProgress, BatchStatus, JobKind, Worker
from coda.inference.spec import BackendSpec
from coda.tasks import load_tasks
from coda_app.liveview import one_line, render, summary
from coda_app.stack import TINY_DEMO_TASKS, StackConfig, choose_models, is_tiny, service_settings


def _cfg(tmp_path: Path, **kw: object) -> StackConfig:
    return StackConfig(home=tmp_path, master_url="http://m", admin_token=SecretStr("a"),
                       worker_token=SecretStr("w"), service_token=SecretStr("s"),
                       service_admin_token=SecretStr("sa"), **kw)  # type: ignore[arg-type]


def test_models_come_from_urls_dirs_or_replays(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, models="replay", model_dirs={"executor": "/models/uitars"},
               model_urls={"judge": "http://vllm:8000/v1"})
    got = choose_models(cfg)
    assert got["planner"].backend == "replay" and Path(got["planner"].model).is_file()
    assert (got["executor"].backend, got["executor"].model) == ("transformers", "/models/uitars")
    assert got["judge"] == BackendSpec(backend="openai", model="judge",
                                       base_url="http://vllm:8000/v1")


def test_the_ocr_executor_is_chosen_by_name(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, models="replay", model_dirs={"executor": "ocr"})
    choice = choose_models(cfg)["executor"]
    assert (choice.backend, choice.model) == ("ocr", "rapidocr")
    settings = service_settings("executor", choice, cfg)
    assert (settings.backend, settings.model) == ("ocr", "rapidocr")
    assert not is_tiny(choice)


def test_a_service_takes_the_chosen_fields_and_its_environment_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack hands a service only what it chose (backend, model, URL): a device or dtype
    set in the service's environment still holds."""
    monkeypatch.setenv("CODA_EXECUTOR_DEVICE", "cuda:1")
    cfg = _cfg(tmp_path, models="replay")
    choice = choose_models(cfg)["executor"]
    settings = service_settings("executor", choice, cfg)
    assert (settings.backend, settings.model, settings.device) \
        == ("replay", choice.model, "cuda:1")
    assert not is_tiny(choice)
    assert is_tiny(BackendSpec(backend="transformers", model=str(tmp_path / "tiny-qwen25vl")))


def test_the_tiny_demo_needs_only_the_local_image_apps() -> None:
    apps = {t.app for path in TINY_DEMO_TASKS for t in load_tasks(path)}
    assert apps <= {"TeXstudio", "KAlgebra"}


def _worker(seconds_ago: float, slots: int, busy: int) -> Worker:
    now = datetime.now(UTC)
    return Worker(id=uuid.uuid4(), name="w", slots=slots, kinds=[JobKind.EPISODE],
                  registered_at=now, last_heartbeat=now - timedelta(seconds=seconds_ago),
                  busy_slots=busy)


def test_live_view_counts_live_workers_and_finished_episodes() -> None:
    batch = Batch(id=uuid.uuid4(), status=BatchStatus.RUNNING, priority=0, rollouts=2,
                  created_at=datetime.now(UTC),
                  progress=BatchProgress(total=4, completed=2, failed=1, succeeded=1))
    report = StatusReport(generated_at=datetime.now(UTC), batches=[batch], scores=[],
                          workers=[_worker(1, 3, 2), _worker(600, 5, 5)], queues=[],
                          recent_episodes=[], verdicts={"judged": 2, "correct": 1},
                          groups={"ready": 3})
    s = summary(report)
    assert (s["episodes_done"], s["succeeded"], s["busy_slots"], s["slots"]) == (3, 1, 2, 3)
    assert s["success_pct"] == 33.3
    assert "3/4 done" in one_line(report, "grpo-000001")
    assert render(report, url="http://m", planner_version=None, problems=["worker"])


def test_live_view_says_what_was_restarted() -> None:
    from rich.console import Console

    report = StatusReport(generated_at=datetime.now(UTC), batches=[], scores=[], workers=[],
                          queues=[], recent_episodes=[])
    console = Console(width=200, record=True)
    console.print(render(report, url="http://m", planner_version=None,
                         problems=["planner: restarted 1x", "redis: down, restart 2 in 2 s"]))
    text = console.export_text()
    assert "restarts: planner: restarted 1x; redis: down, restart 2 in 2 s" in text
