"""The master's training routes: figures per update and planner version (JSON and status
page), verdicts, judged trajectories; bad input gets a 4xx naming the field."""

from __future__ import annotations

import uuid

import httpx
import pytest

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.training import TrainingMetricsReport, Verdict
from master.repos.training import summarize


async def test_figures_per_version_reach_json_and_status_page(admin: MasterClient,
                                                               master) -> None:  # type: ignore[no-untyped-def]
    for update, version, reward in ((1, "base", 0.5), (2, "run-000001", 0.7),
                                    (3, "run-000002", 0.9), (4, "run-000002", 0.95)):
        await admin.report_training(TrainingMetricsReport(
            run="run", update=update, planner_version=version,
            metrics={"reward_mean": reward, "loss": -0.01 * update, "kl": 0.001,
                     "clip_fraction": 0.0, "tokens_per_s": 100.0, "groups_per_s": 2.0}))
    # a repeated report of an update replaces it (a trainer retrying after a timeout)
    await admin.report_training(TrainingMetricsReport(
        run="run", update=4, planner_version="run-000002", metrics={"reward_mean": 0.97}))
    items = (await admin.training_metrics(run="run")).items
    assert [i.update for i in items] == [1, 2, 3, 4]
    assert items[-1].metrics == {"reward_mean": 0.97}
    only = (await admin.training_metrics(planner_version="run-000002")).items
    assert [i.update for i in only] == [3, 4]
    versions = await admin.training_by_version(run="run")
    assert [(v.planner_version, v.updates) for v in versions] == [
        ("base", 1), ("run-000001", 1), ("run-000002", 2)]
    assert versions[-1].means["reward_mean"] == pytest.approx((0.9 + 0.97) / 2)
    assert versions[-1].last == {"reward_mean": 0.97}
    report = await admin.status()
    assert len(report.training) == 3 and len(report.training_curve) == 4
    page = httpx.get(f"{master.url}/", headers={"authorization":
                                                  f"Bearer {master.admin_token}"}).text
    assert 'id="training"' in page and "run-000002" in page and "0.935" in page
    assert "<polyline" in page


async def test_bad_training_input_gets_a_clear_4xx(admin: MasterClient,
                                                   master) -> None:  # type: ignore[no-untyped-def]
    headers = {"authorization": f"Bearer {master.admin_token}"}
    good = {"run": "r", "update": 1, "planner_version": "v", "metrics": {"loss": 1.0}}
    cases = [({**good, "run": "a b"}, "run"), ({**good, "update": -1}, "update"),
             ({**good, "update": 2**31}, "update"), ({**good, "metrics": {"x y": 1.0}}, "[key]"),
             ({**good, "planner_version": "v" * 201}, "planner_version"),
             ({**good, "extra": 1}, "extra")]
    for body, field in cases:
        resp = httpx.post(f"{master.url}/v1/training/metrics", json=body, headers=headers)
        assert resp.status_code == 422, body
        assert field in resp.text
    resp = httpx.post(f"{master.url}/v1/training/metrics", json=good)
    assert resp.status_code == 401
    with pytest.raises(ServiceError) as err:
        await admin.set_verdict(uuid.uuid4(), Verdict(correct=True))
    assert err.value.status == 404
    resp = httpx.get(f"{master.url}/v1/training/trajectories", params={"verdict": "maybe"},
                     headers=headers)
    assert resp.status_code == 422 and "verdict" in resp.text
    resp = httpx.get(f"{master.url}/v1/training/metrics", params={"limit": 0}, headers=headers)
    assert resp.status_code == 422 and "limit" in resp.text


def test_non_finite_figures_are_refused_by_the_contract() -> None:
    with pytest.raises(ValueError, match="finite"):
        TrainingMetricsReport(run="r", update=1, planner_version="v",
                              metrics={"loss": float("nan")})


def test_summarize_is_per_run_and_version() -> None:
    from datetime import UTC, datetime

    from coda.contracts.training import TrainingMetrics

    now = datetime.now(UTC)
    rows = [TrainingMetrics(run=r, update=u, planner_version=v, metrics=m, created_at=now)
            for r, u, v, m in (("a", 1, "base", {"x": 1.0}), ("a", 2, "base", {"x": 3.0, "y": 1}),
                               ("b", 1, "base", {"x": 5.0}))]
    out = summarize(rows)
    assert [(s.run, s.updates, s.means) for s in out] == [
        ("a", 2, {"x": 2.0, "y": 1.0}), ("b", 1, {"x": 5.0})]
