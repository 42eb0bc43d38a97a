"""REST surface of the master: auth, validation, artifacts, status, groups, versions."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from coda.clients.base import ServiceError
from coda.contracts.jobs import (
    EpisodeResult,
    GroupJob,
    GroupJobPayload,
    GroupJobResult,
    JudgeJob,
    JudgeJobPayload,
)
from coda.contracts.master_api import (
    GroupJobCreate,
    GroupLeaseRequest,
    JudgeJobCreate,
    WorkerRegister,
)
from coda.contracts.records import JobKind
from coda.contracts.training import (
    Candidate,
    Group,
    GroupStatus,
    ModelRole,
    ModelVersionCreate,
    StateRef,
)
from tests.fixtures.images import image_bytes
from tests.master.conftest import SCIENCEBOARD, submit, task_docs


def test_openapi_schema_is_served(master):
    schema = httpx.get(f"{master.url}/openapi.json").json()
    for path in ("/v1/batches", "/v1/jobs/lease", "/v1/jobs/{job_id}/complete",
                 "/v1/artifacts", "/v1/groups/lease", "/v1/models/current", "/v1/status"):
        assert path in schema["paths"], path


def test_auth_401_and_403(master):
    body = {"tasks": task_docs(1)}
    assert httpx.post(f"{master.url}/v1/batches", json=body).status_code == 401
    bad = {"authorization": "Bearer not-a-token"}
    assert httpx.post(f"{master.url}/v1/batches", json=body, headers=bad).status_code == 401
    worker = {"authorization": f"Bearer {master.worker_token}"}
    assert httpx.post(f"{master.url}/v1/batches", json=body, headers=worker).status_code == 403
    # workers need a token too
    lease = {"worker_id": str(uuid.uuid4())}
    assert httpx.post(f"{master.url}/v1/jobs/lease", json=lease).status_code == 401


def test_status_can_be_token_gated(master_factory):
    m = master_factory(CODA_PUBLIC_STATUS="false")
    assert httpx.get(f"{m.url}/v1/status").status_code == 401
    assert httpx.get(f"{m.url}/").status_code == 401
    ok = httpx.get(f"{m.url}/v1/status", headers={"authorization": f"Bearer {m.worker_token}"})
    assert ok.status_code == 200


def test_bad_input_names_the_field(master):
    h = {"authorization": f"Bearer {master.admin_token}"}
    r = httpx.post(f"{master.url}/v1/batches", json={"tasks": task_docs(1), "rollouts": 0},
                   headers=h)
    assert r.status_code == 422
    assert any(e["loc"][-1] == "rollouts" for e in r.json()["detail"])
    broken = task_docs(2)
    del broken[1]["instruction"]
    r = httpx.post(f"{master.url}/v1/batches", json={"tasks": broken}, headers=h)
    assert r.status_code == 422
    [err] = r.json()["detail"]
    assert err["loc"] == ["body", "tasks", 1] and "instruction" in err["msg"]
    r = httpx.post(f"{master.url}/v1/batches", json={"tasks": []}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "tasks"
    # nothing was created by the refused requests
    assert httpx.get(f"{master.url}/v1/batches").json()["total"] == 0


def test_upload_batch_file_and_bad_json(master, tmp_path):
    h = {"authorization": f"Bearer {master.admin_token}"}
    f = SCIENCEBOARD / "VM" / "Lean" / "A-01.json"
    if not f.exists():
        f = next((SCIENCEBOARD / "VM" / "Lean").glob("*.json"))
    r = httpx.post(f"{master.url}/v1/batches/upload", headers=h,
                   files={"file": (f.name, f.read_bytes())}, data={"rollouts": "3"})
    assert r.status_code == 201, r.text
    assert r.json()["batch"]["progress"]["total"] == 3
    ep = httpx.get(f"{master.url}/v1/episodes").json()["items"][0]
    assert ep["task_id"] == f"Lean/{f.stem}" and ep["app"] == "Lean"
    r = httpx.post(f"{master.url}/v1/batches/upload", headers=h,
                   files={"file": ("x.json", b"{not json")})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "file"]


def test_artifacts_upload_limits_and_traversal(master):
    h = {"authorization": f"Bearer {master.worker_token}"}
    data = image_bytes((64, 40), (200, 30, 30))
    r = httpx.post(f"{master.url}/v1/artifacts", headers=h,
                   files={"file": ("s.png", data, "image/png")})
    assert r.status_code == 201
    key = r.json()["key"]
    assert key.startswith("sha256/") and key.endswith(".png")
    again = httpx.post(f"{master.url}/v1/artifacts", headers=h,
                       files={"file": ("s.png", data, "image/png")})
    assert again.json()["key"] == key  # content addressed
    got = httpx.get(f"{master.url}/v1/artifacts/{key}")
    assert got.status_code == 200 and got.content == data
    assert got.headers["content-type"] == "image/png"
    big = image_bytes((600, 600), (200, 30, 30)) + b"\0" * 70_000  # over the 64 KiB test limit
    r = httpx.post(f"{master.url}/v1/artifacts", headers=h,
                   files={"file": ("b.png", big, "image/png")})
    assert r.status_code == 413
    r = httpx.post(f"{master.url}/v1/artifacts", headers=h,
                   files={"file": ("x.sh", b"#!/bin/sh", "text/x-sh")})
    assert r.status_code == 415
    r = httpx.post(f"{master.url}/v1/artifacts", headers=h,
                   files={"file": ("fake.png", b"GIF89a....", "image/png")})
    assert r.status_code == 415
    for evil in ("../../etc/passwd", "sha256/../../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd",
                 "sha256/ab/" + "a" * 64 + ".png/../../x"):
        r = httpx.get(f"{master.url}/v1/artifacts/{evil}")
        assert r.status_code in (400, 404), evil
        assert b"root:" not in r.content


def test_body_size_limit_413(master_factory):
    m = master_factory(CODA_MAX_BODY_BYTES="4096")
    h = {"authorization": f"Bearer {m.admin_token}"}
    r = httpx.post(f"{m.url}/v1/batches", headers=h,
                   content=json.dumps({"tasks": task_docs(5)}).encode() + b" " * 5000,
                   )
    assert r.status_code == 413


def test_default_secret_refused_outside_dev(master_factory):
    with pytest.raises(RuntimeError, match="exited"):
        master_factory(CODA_ADMIN_TOKEN="change-me-admin")


async def test_status_page_json_and_metrics(master, admin, wclient, worker):
    created = await submit(admin, n_tasks=2, rollouts=2, name="demo")
    jobs = await wclient.lease(worker.id, capacity=4)
    for i, job in enumerate(jobs):
        await wclient.complete(job, EpisodeResult(success=i == 0))
    st = await admin.status()
    assert st.batches[0].id == created.batch.id
    kalg = next(s for s in st.scores if s.app == "KAlgebra")
    assert kalg.tasks == 2 and kalg.rollouts == 4
    assert kalg.average_at_k == 25.0 and kalg.pass_at_k == 50.0
    assert st.workers[0].name == "test-worker"
    beat = await wclient.worker_heartbeat(worker.id, busy_slots=3)
    assert beat.busy_slots == 3 and beat.last_heartbeat >= st.workers[0].last_heartbeat
    assert (await wclient.worker_heartbeat(worker.id, busy_slots=99)).busy_slots == 8  # capped
    with pytest.raises(ServiceError) as err:
        await wclient.worker_heartbeat(uuid.uuid4())
    assert err.value.status == 404
    assert {q.kind for q in st.queues} == set(JobKind)
    html = httpx.get(f"{master.url}/").text
    assert 'http-equiv="refresh"' in html and "Average@k" in html and "demo" in html
    assert "test-worker" in html and "8 / 8" in html
    metrics = httpx.get(f"{master.url}/metrics").text
    assert "http_requests_total" in metrics and "coda_jobs_leased_total" in metrics


async def test_status_says_which_workers_are_online(master, admin, wclient, worker):
    """A worker whose heartbeat is older than the lease TTL (2 s here) shows as gone in the
    status JSON, /v1/workers and the dashboard; one that comes back registers a new row."""
    st = await admin.status()
    assert [(w.name, w.online) for w in st.workers] == [("test-worker", True)]
    master.advance_clock(5)
    st = await admin.status()
    assert [(w.name, w.online) for w in st.workers] == [("test-worker", False)]
    assert 'class="worker-state">gone' in httpx.get(f"{master.url}/").text
    back = await wclient.register_worker(WorkerRegister(name="test-worker", slots=2))
    listed = httpx.get(f"{master.url}/v1/workers").json()
    assert [(w["id"], w["online"]) for w in listed][:1] == [(str(back.id), True)]
    assert [w["online"] for w in listed] == [True, False]
    assert 'class="worker-state">online' in httpx.get(f"{master.url}/").text


async def test_judge_jobs_by_kind(master, admin, wclient, worker):
    episode = uuid.uuid4()
    created = await admin.create_job(JudgeJobCreate(
        kind=JobKind.JUDGE, payload=JudgeJobPayload(episode_id=episode)))
    assert await wclient.lease(worker.id, JobKind.EPISODE) == []
    [job] = await wclient.lease(worker.id, JobKind.JUDGE)
    assert isinstance(job, JudgeJob) and job.id == created.id
    assert job.payload == JudgeJobPayload(episode_id=episode)
    h = {"Authorization": f"Bearer {master.admin_token}"}
    # the kind says the payload's type: a judge job names its episode, and knows nothing else
    for payload, loc in (({"episode": "x"}, ["body", "judge", "payload", "episode_id"]),
                         ({"episode_id": str(episode), "step_index": 1},
                          ["body", "judge", "payload", "step_index"])):
        r = httpx.post(f"{master.url}/v1/jobs", headers=h,
                       json={"kind": "judge", "payload": payload})
        assert r.status_code == 422 and loc in [e["loc"] for e in r.json()["detail"]], r.text
    # episode jobs come from batches only: no such kind here
    r = httpx.post(f"{master.url}/v1/jobs", headers=h, json={"kind": "episode", "payload": {}})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "union_tag_invalid"


def _group(version: str | None) -> Group:
    state = StateRef(step_index=2, instruction="plot x^2", app="KAlgebra",
                     screenshot="sha256/ab/" + "a" * 64 + ".png", screen_width=1280,
                     screen_height=800)
    return Group(state=state, target={"type": "click", "x": 10, "y": 20},
                 candidates=[Candidate(plan="Thought: click", reward=r, planner_version=version)
                             for r in (0.0, 0.5, 1.0)],
                 planner_version=version)


async def test_groups_lease_ack_and_staleness(admin, wclient):
    for v in ("v1", "v2", "v2"):
        await wclient.create_group(_group(v))
    fresh = await wclient.lease_groups(GroupLeaseRequest(max_groups=10, planner_versions=["v2"]))
    assert [g.group.planner_version for g in fresh.items] == ["v2", "v2"]
    g = fresh.items[0]
    await wclient.ack_group(g.id, g.lease_token or "")
    with pytest.raises(ServiceError) as err:
        await wclient.ack_group(g.id, g.lease_token or "")
    assert err.value.status == 409
    rest = await wclient.lease_groups(GroupLeaseRequest(max_groups=10))
    assert [x.group.planner_version for x in rest.items] == ["v1"]
    await wclient.ack_group(rest.items[0].id, rest.items[0].lease_token or "",
                            GroupStatus.DROPPED)


async def test_group_job_result_becomes_a_group(master, admin, wclient, worker):
    episode = uuid.uuid4()
    await admin.create_job(GroupJobCreate(kind=JobKind.GROUP, payload=GroupJobPayload(
        episode_id=episode, attempt=1, step_index=2)))
    [job] = await wclient.lease(worker.id, JobKind.GROUP)
    assert isinstance(job, GroupJob) and job.payload.step_index == 2
    # a result of another kind is refused before it leaves the client, and by the master
    with pytest.raises(ValueError, match="group"):
        await wclient.complete(job, EpisodeResult(success=True))
    r = httpx.post(f"{master.url}/v1/jobs/{job.id}/complete",
                   headers={"Authorization": f"Bearer {master.worker_token}"},
                   json={"lease_token": job.lease_token, "kind": "episode", "result": {}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "kind"], r.text
    await wclient.complete(job, GroupJobResult(group=_group(None)))
    [got] = (await wclient.lease_groups(GroupLeaseRequest())).items
    assert got.group.state.step_index == 2 and got.group.planner_version is None


async def test_model_versions(admin, wclient):
    with pytest.raises(ServiceError) as err:
        await admin.current_version()
    assert err.value.status == 404
    spec = ModelVersionCreate(name="planner-v1", base_model="Qwen/Qwen2.5-VL-32B-Instruct",
                              adapter_uri="file:///adapters/v1")
    await admin.register_version(spec)
    await admin.register_version(
        spec.model_copy(update={"name": "planner-v2", "parent": "planner-v1"}))
    assert (await wclient.current_version()).name == "planner-v2"
    names = [v.name for v in (await wclient.list_versions(ModelRole.PLANNER)).items]
    assert names == ["planner-v1", "planner-v2"]
    with pytest.raises(ServiceError) as err:
        await admin.register_version(spec)
    assert err.value.status == 409
    with pytest.raises(ServiceError) as err:  # workers cannot publish versions
        await wclient.register_version(spec.model_copy(update={"name": "planner-v3"}))
    assert err.value.status == 403


def test_episode_payload_is_the_contract():
    """The batch insert writes EpisodePayload's JSON by hand (fast): it must read back as one."""
    import uuid as _uuid

    from coda.contracts.jobs import EpisodePayload
    from coda.contracts.master_api import BatchCreate
    from master.batches import build_rows
    from master.routes.batches import parse_tasks

    spec = BatchCreate(tasks=task_docs(2), rollouts=2, planner_version='v"1')
    bid = _uuid.uuid4()
    rows = build_rows(bid, spec, parse_tasks(spec.tasks))
    payloads = [EpisodePayload.model_validate_json(p) for p in rows.payloads]
    assert [p.rollout for p in payloads] == [0, 1, 0, 1]
    assert {p.batch_id for p in payloads} == {bid} and payloads[0].planner_version == 'v"1'
    assert [p.episode_id for p in payloads] == rows.episode_ids
    assert payloads[2].task == parse_tasks(spec.tasks)[1]


async def test_success_rate_per_planner_version_of_a_batch(master, admin, wclient, worker):
    """An unpinned batch: each episode records the version its steps ran (the base model: its
    steps carry none), and the batch's rates per version come with their 95 % intervals, as
    JSON and as the dashboard's chart; a pinned batch counts under its pin."""
    from coda.contracts.records import Step

    created = await submit(admin, n_tasks=1, rollouts=4, name="versions")
    jobs = await wclient.lease(worker.id, capacity=4)
    runs = [("v2", True), ("v2", False), (None, True), ("v2", True)]
    for job, (version, ok) in zip(jobs, runs, strict=True):
        await wclient.report_step(job, Step(index=0, thought="t", planner_version=version))
        await wclient.complete(job, EpisodeResult(success=ok))
    rates = {r.planner_version: r for r in (await admin.batch_versions(created.batch.id)).items}
    assert set(rates) == {"v2", "base"}
    assert (rates["v2"].rollouts, rates["v2"].succeeded) == (3, 2)
    assert 0 < rates["v2"].ci_low < 2 / 3 < rates["v2"].ci_high < 1
    assert (rates["base"].rollouts, rates["base"].rate) == (1, 1.0)
    versions = sorted([str((await admin.get_episode(e, steps=False)).planner_version)
                       for e in created.episode_ids])
    assert versions == ["None", "v2", "v2", "v2"]
    pinned = await submit(admin, n_tasks=1, rollouts=1, planner_version="v9")
    [job] = await wclient.lease(worker.id, capacity=1)
    await wclient.complete(job, EpisodeResult(success=False))
    assert [r.planner_version for r in (await admin.batch_versions(pinned.batch.id)).items] \
        == ["v9"]
    st = await admin.status()
    assert [r.planner_version for r in st.version_rates] == ["v9"]  # the newest batch
    assert {r.planner_version for r in st.version_rates_all} == {"v2", "base", "v9"}
    page = httpx.get(f"{master.url}/?batch_id={created.batch.id}").text
    assert 'id="version-rates"' in page and 'id="version-rates-all"' in page
    assert "v2: 2 of 3" in page
    with pytest.raises(ServiceError) as err:
        await admin.batch_versions(uuid.uuid4())
    assert err.value.status == 404
