"""Requests the master must do once however often they are sent, over real HTTP on a real
master: a batch (JSON and upload), an admin's job, a lease of jobs and a lease of groups sent
again with their ``Idempotency-Key`` get what the first request made, never a second one; a key
sent with another body is refused naming the header. And a job given back uncounted (a
worker's infrastructure fault) keeps its attempt."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.fixtures.master import MasterProcess, example_tasks, group_body
from tests.fixtures.waiting import wait_for


def _client(m: MasterProcess, token: str) -> httpx.Client:
    return httpx.Client(base_url=m.url, timeout=60, headers={"authorization": f"Bearer {token}"})


@pytest.fixture
def admin(master: MasterProcess) -> httpx.Client:
    return _client(master, master.admin_token)


@pytest.fixture
def worker(master: MasterProcess) -> httpx.Client:
    return _client(master, master.worker_token)


def _key() -> dict[str, str]:
    return {"idempotency-key": uuid.uuid4().hex}


def test_a_batch_sent_again_with_its_key_is_the_batch_the_first_one_made(
        admin: httpx.Client) -> None:
    body = {"name": "once", "tasks": example_tasks(2), "rollouts": 2}
    key = _key()
    first = admin.post("/v1/batches", json=body, headers=key)
    again = admin.post("/v1/batches", json=body, headers=key)
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json()["batch"]["id"] == first.json()["batch"]["id"]
    assert again.json()["episode_ids"] == first.json()["episode_ids"]
    assert admin.get("/v1/batches").json()["total"] == 1
    other = admin.post("/v1/batches", json={**body, "rollouts": 1}, headers=key)
    assert other.status_code == 422
    assert other.json()["detail"][0]["loc"] == ["header", "idempotency-key"]
    assert admin.post("/v1/batches", json=body).status_code == 201  # no key: a new batch
    assert admin.get("/v1/batches").json()["total"] == 2
    bad = admin.post("/v1/batches", json=body, headers={"idempotency-key": "a b"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == [
        "header", "idempotency-key"]


def test_an_upload_sent_again_with_its_key_is_one_batch(admin: httpx.Client) -> None:
    import json

    doc = json.dumps(example_tasks(1)[0]).encode()
    key = _key()
    sent = [admin.post("/v1/batches/upload", headers=key, data={"rollouts": "2"},
                       files={"file": ("C-01.json", doc, "application/json")})
            for _ in range(2)]
    assert [r.status_code for r in sent] == [201, 201], [r.text for r in sent]
    assert sent[0].json()["batch"]["id"] == sent[1].json()["batch"]["id"]
    assert admin.get("/v1/batches").json()["total"] == 1


def test_a_job_and_leases_sent_again_with_their_keys_are_done_once(
        admin: httpx.Client, worker: httpx.Client) -> None:
    episodes = admin.post("/v1/batches", json={"tasks": example_tasks(3)}).json()["episode_ids"]
    key = _key()
    judge = {"kind": "judge", "payload": {"episode_id": episodes[0]}}
    made = [admin.post("/v1/jobs", json=judge, headers=key) for _ in range(2)]
    assert [r.status_code for r in made] == [201, 201]
    assert made[0].json() == made[1].json() and made[1].headers["idempotent-replayed"] == "true"
    assert admin.get("/v1/status").json()["queues"][1] == {"kind": "judge", "queued": 1,
                                                           "leased": 0}

    wid = worker.post("/v1/workers", json={"name": "w", "slots": 2}).json()["id"]
    lease = {"worker_id": wid, "kind": "episode", "capacity": 1}
    key = _key()
    got = [worker.post("/v1/jobs/lease", json=lease, headers=key).json()["jobs"]
           for _ in range(2)]
    assert len(got[0]) == 1 and got[0] == got[1]  # the same job, with the same token
    other = worker.post("/v1/jobs/lease", json=lease, headers=_key()).json()["jobs"]
    assert [j["id"] for j in other] != [j["id"] for j in got[0]]  # a new key: the next job
    assert admin.get(f"/v1/jobs/{got[0][0]['id']}").json()["attempts"] == 1

    for version in ("v1", "v2"):
        assert worker.post("/v1/groups", json={"group": group_body(version)}).status_code == 201
    key = _key()
    leased = [worker.post("/v1/groups/lease", json={"max_groups": 1}, headers=key).json()
              for _ in range(2)]
    assert len(leased[0]["items"]) == 1 and leased[0] == leased[1]
    assert worker.get("/v1/groups/counts").json() == {"leased": 1, "ready": 1}


def test_a_job_given_back_keeps_its_attempt_and_drops_that_attempts_steps(
        admin: httpx.Client, worker: httpx.Client) -> None:
    from tests.fixtures.images import image_bytes

    [episode] = admin.post("/v1/batches", json={"tasks": example_tasks(1),
                                                "max_attempts": 1}).json()["episode_ids"]
    wid = worker.post("/v1/workers", json={"name": "w", "slots": 1}).json()["id"]
    [job] = worker.post("/v1/jobs/lease", json={"worker_id": wid}).json()["jobs"]
    shot = worker.post("/v1/artifacts", files={"file": ("s.png", image_bytes((4, 4), (1, 2, 3)),
                                                        "image/png")}).json()["key"]
    step: dict[str, Any] = {"index": 0, "screenshot": shot, "screen": {"width": 4, "height": 4}}
    assert worker.post(f"/v1/jobs/{job['id']}/steps",
                       json={"lease_token": job["lease_token"], "step": step}).status_code == 204
    back = worker.post(f"/v1/jobs/{job['id']}/release",
                       json={"lease_token": job["lease_token"],
                             "reason": "provider_down: unreachable: vSphere vc:443"})
    assert back.status_code == 200, back.text
    state = back.json()
    assert state["status"] == "queued" and state["attempts"] == 0
    assert state["error"] == "released: provider_down: unreachable: vSphere vc:443"
    ep = admin.get(f"/v1/episodes/{episode}", params={"steps": "true"}).json()
    assert ep["status"] == "queued" and ep["attempts"] == 0 and ep["steps"] == []
    again = worker.post(f"/v1/jobs/{job['id']}/release",
                        json={"lease_token": job["lease_token"], "reason": "twice"})
    assert again.status_code == 409  # the lease went with the first
    # max_attempts 1: had the attempt counted, the next failure would be final
    [job2] = wait_for(lambda: worker.post("/v1/jobs/lease", json={"worker_id": wid}).json()[
        "jobs"], "the job queued again", 30)
    assert job2["id"] == job["id"] and job2["attempt"] == 1
