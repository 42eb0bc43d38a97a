"""Every class of bad input gets a clear 4xx naming the field, stores nothing, never a 500:
one table per class, against one real master seeded with real resources."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.images import image_bytes
from tests.fixtures.master import MasterProcess, Seeded, example_tasks, seed_master

NUL, SURROGATE = "a\\u0000b", "a\\ud800b"  # as they appear in JSON text
Q = '"'


@pytest.fixture(scope="module")
def seeded(module_master: MasterProcess) -> Seeded:
    return seed_master(module_master)


@pytest.fixture(scope="module")
def http(module_master: MasterProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=module_master.url, timeout=60) as c:
        yield c


def _headers(m: MasterProcess, who: str) -> dict[str, str]:
    token = {"admin": m.admin_token, "worker": m.worker_token}.get(who)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _counts(http: httpx.Client) -> dict[str, Any]:
    """What a refused request must not have changed."""
    batches = http.get("/v1/batches").json()["total"]
    episodes = http.get("/v1/episodes").json()["total"]
    workers = len(http.get("/v1/workers").json())
    return {"batches": batches, "episodes": episodes, "workers": workers,
            "groups": http.get("/v1/groups/counts").json(),
            "models": len(http.get("/v1/models").json()["items"])}


def _post_raw(http: httpx.Client, m: MasterProcess, who: str, path: str,
              text: str) -> httpx.Response:
    return http.post(path, content=text.encode("utf-8", "surrogatepass"),
                     headers={**_headers(m, who), "Content-Type": "application/json"})


def _task(**fields: Any) -> str:
    """A real ScienceBoard document as JSON text with some fields replaced by raw JSON."""
    doc = dict(example_tasks(1)[0])
    text = json.dumps({k: v for k, v in doc.items() if k not in fields})
    extra = ", ".join(f'"{k}": {v}' for k, v in fields.items())
    return text[:-1] + (", " + extra if extra else "") + "}"


def _check(r: httpx.Response, status: int, field: str | None) -> None:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json")
    if field is not None:
        assert field in json.dumps(r.json()), r.text[:500]


# (who, path, JSON text, status, a field name the answer must mention)
TEXT_CASES = [  # NUL in a stored string, a lone surrogate, in keys too
    ("worker", "/v1/workers", f'{{"name": "{NUL}"}}', "name"),
    ("worker", "/v1/workers", f'{{"name": "w", "apps": ["{NUL}"]}}', "apps"),
    ("worker", "/v1/workers", f'{{"name": "{SURROGATE}"}}', "name"),
    ("admin", "/v1/batches", f'{{"name": "{NUL}", "tasks": [{_task()}]}}', "name"),
    ("admin", "/v1/batches", f'{{"tasks": [{_task(instruction=Q + NUL + Q)}]}}', "instruction"),
    ("admin", "/v1/batches", f'{{"tasks": [{_task(instruction=Q + SURROGATE + Q)}]}}',
     "instruction"),
    ("admin", "/v1/jobs", f'{{"kind": "judge", "payload": {{"{NUL}": 1}}}}', "payload"),
    ("worker", "/v1/jobs/{job_id}/steps",
     f'{{"lease_token": "{{lease_token}}", "step": {{"index": 0, "thought": "{NUL}"}}}}',
     "thought"),
    ("worker", "/v1/jobs/{job_id}/complete",
     f'{{"lease_token": "{{lease_token}}", "kind": "episode", "result": {{"answer": "{NUL}"}}}}',
     "answer"),
    ("worker", "/v1/jobs/{job_id}/fail",
     f'{{"lease_token": "{{lease_token}}", "error": "{NUL}"}}', "error"),
    ("admin", "/v1/models", f'{{"name": "m", "base_model": "{NUL}"}}', "base_model"),
    ("admin", "/v1/models", f'{{"name": "m", "base_model": "b", "parent": "{SURROGATE}"}}',
     "parent"),
    ("worker", "/v1/groups", '{"group": ' + json.dumps(
        {"state": {"step_index": 0, "instruction": "NUL", "app": "a", "screenshot": "k",
                   "screen_width": 1280, "screen_height": 800},
         "target": {"type": "wait"}, "candidates": [{"plan": "p", "reward": 0}]}).replace(
        '"NUL"', f'"{NUL}"') + "}", "instruction"),
]
NUMBER_CASES = [  # NaN, Infinity, 1e400 anywhere: refused when parsed
    ("worker", "/v1/jobs/lease", '{"worker_id": "{worker_id}", "wait_s": NaN}', None),
    ("worker", "/v1/jobs/lease", '{"worker_id": "{worker_id}", "capacity": Infinity}', None),
    ("admin", "/v1/batches", f'{{"tasks": [{_task()}], "priority": -Infinity}}', None),
    ("worker", "/v1/jobs/{job_id}/complete",
     '{"lease_token": "{lease_token}", "kind": "episode", "result": {"score": NaN}}', None),
    ("worker", "/v1/jobs/{job_id}/steps",
     '{"lease_token": "{lease_token}", "step": {"index": 0, "latency_ms": 1e400}}', None),
    ("worker", "/v1/jobs/{job_id}/complete",
     '{"lease_token": "{lease_token}", "kind": "episode", "result": {"info": {"x": -1e999}}}',
     None),
    ("admin", "/v1/models", '{"name": "m", "base_model": "b", "metrics": {"reward": NaN}}', None),
]
GROUP = {"state": {"step_index": 0, "instruction": "i", "app": "a", "screenshot": "k",
                   "screen_width": 1280, "screen_height": 800},
         "target": {"type": "wait"}, "candidates": [{"plan": "p", "reward": 0}]}
BIG = 32589158477190044731  # a step index a fuzzer sent: the replay's int cast overflowed


def _group(**state: Any) -> str:
    return json.dumps({**GROUP, "state": {**GROUP["state"], **state}})  # type: ignore[dict-item]


RANGE_CASES = [  # integers past their column, strings longer than theirs
    ("worker", "/v1/workers/{worker_id}/heartbeat", '{"busy_slots": 2147483648}', "busy_slots"),
    ("worker", "/v1/jobs/{job_id}/steps",
     '{"lease_token": "{lease_token}", "step": {"index": 2147483648}}', "index"),
    ("admin", "/v1/batches", f'{{"tasks": [{_task()}], "priority": 9223372036854775808}}',
     "priority"),
    ("worker", "/v1/jobs/lease", '{"worker_id": "{worker_id}", "capacity": 4294967296}',
     "capacity"),
    ("admin", "/v1/batches", f'{{"tasks": [{_task()}], "planner_version": "{"v" * 300}"}}',
     "planner_version"),
    ("admin", "/v1/batches", f'{{"tasks": [{_task()}], "name": "{"n" * 201}"}}', "name"),
    ("admin", "/v1/models", f'{{"name": "m", "base_model": "b", "parent": "{"p" * 300}"}}',
     "parent"),
    ("admin", "/v1/models", f'{{"name": "{"m" * 201}", "base_model": "b"}}', "name"),
    ("worker", "/v1/workers", f'{{"name": "{"w" * 201}"}}', "name"),
    ("worker", "/v1/workers", f'{{"name": "w", "host": "{"h" * 201}"}}', "host"),
    ("worker", "/v1/workers", f'{{"name": "w", "apps": ["{"a" * 101}"]}}', "apps"),
    ("worker", "/v1/jobs/{job_id}/heartbeat", f'{{"lease_token": "{"t" * 65}"}}', "lease_token"),
    ("worker", "/v1/groups/lease", f'{{"planner_versions": ["{"v" * 201}"]}}', "planner_versions"),
    ("worker", "/v1/groups", '{"group": ' + json.dumps(
        {"state": {"step_index": 0, "instruction": "i", "app": "a", "screenshot": "k",
                   "screen_width": 1280, "screen_height": 800},
         "target": {"type": "wait"}, "candidates": [{"plan": "p", "reward": 0}],
         "planner_version": "v" * 300}) + "}", "planner_version"),
    # numbers past what their readers hold (an index read as int, a tensor's token id, a
    # screen coordinate, a time), through every route that writes them
    ("worker", "/v1/groups", f'{{"group": {_group(step_index=BIG)}}}', "step_index"),
    ("worker", "/v1/groups", f'{{"group": {_group(step_index=100_001)}}}', "step_index"),
    ("worker", "/v1/groups", f'{{"group": {_group(screen_width=2**31)}}}', "screen_width"),
    ("worker", "/v1/groups", '{"group": ' + json.dumps(
        {**GROUP, "candidates": [{"plan": "p", "reward": 0, "token_ids": [2**40]}]}) + "}",
     "token_ids"),
    ("worker", "/v1/groups", '{"group": ' + json.dumps(
        {**GROUP, "candidates": [{"plan": "p", "reward": 0, "token_count": 2**31}]}) + "}",
     "token_count"),
    ("worker", "/v1/jobs/{group_job_id}/complete",
     f'{{"lease_token": "{{group_job_token}}", "kind": "group", '
     f'"result": {{"group": {_group(step_index=BIG)}}}}}', "step_index"),
    ("worker", "/v1/jobs/{job_id}/steps",
     '{"lease_token": "{lease_token}", "step": {"index": 0, "latency_ms": 1e300}}',
     "latency_ms"),
    ("worker", "/v1/jobs/{job_id}/steps", '{"lease_token": "{lease_token}", "step": '
     '{"index": 0, "action": {"type": "click", "x": 1099511627776, "y": 1}}}', "x"),
    ("worker", "/v1/jobs/{job_id}/steps", '{"lease_token": "{lease_token}", "step": '
     '{"index": 0, "attempt": 9223372036854775808}}', "attempt"),
    ("worker", "/v1/jobs/{job_id}/complete", '{"lease_token": "{lease_token}", "kind": '
     '"episode", "result": {"steps": 2147483648}}', "steps"),
    ("worker", "/v1/jobs/{job_id}/complete", '{"lease_token": "{lease_token}", "kind": '
     '"episode", "result": {"info": {"end": "DONE", "verdict": "success", "slot": 0, '
     '"overhead_ms": [1e300]}}}', "overhead_ms"),
    ("admin", "/v1/jobs", '{"kind": "group", "payload": {"episode_id": "{episode_id}", '
     '"attempt": 2147483648, "step_index": 0}}', "attempt"),
    ("worker", "/v1/training/metrics", '{"run": "r", "update": 2147483648, '
     '"planner_version": "v"}', "update"),
]
TASK_CASES = [  # task documents with fields of the wrong type (ScienceBoard and OSWorld)
    *[(_task(steps=v), "steps") for v in ('"abc"', "null", "[1]", "1.5")],
    *[(_task(initialize=v), "initialize") for v in ("5", "null", '"x"', "[5]", '[{"func": 5}]')],
    (_task(evaluate="[5]"), "evaluate"),
    (_task(type="5"), "type"),
    *[(json.dumps({"id": "o1", "instruction": "do", "config": c}), "config") for c in (
        [5], ["launch"], [{"type": "launch", "parameters": 5}], [{"parameters": {}}])],
    (json.dumps({"id": "o1", "instruction": "do", "config": [], "related_apps": 5}),
     "related_apps"),
    (json.dumps({"id": "o1", "instruction": "do", "evaluator": [1]}), "evaluator"),
    (json.dumps({"id": "t", "app": "a", "instruction": "i", "step_budget": "many"}),
     "step_budget"),
    ("5", "a task must be a JSON object"),
]


def _run_case(http: httpx.Client, m: MasterProcess, seeded: Seeded, who: str, path: str,
              text: str) -> httpx.Response:
    values = seeded.values()
    for k, v in values.items():
        text = text.replace("{" + k + "}", v)
    return _post_raw(http, m, who, path.format(**values), text)


@pytest.mark.parametrize(("who", "path", "text", "field"),
                         TEXT_CASES + NUMBER_CASES + RANGE_CASES, ids=lambda v: str(v)[:40])
def test_bad_json_values_are_refused(module_master, seeded, http, who, path, text, field):
    before = _counts(http)
    r = _run_case(http, module_master, seeded, who, path, text)
    _check(r, 422, field)
    assert _counts(http) == before
    # the lease survived the refusal: the same token still heartbeats
    ok = http.post(f"/v1/jobs/{seeded.job_id}/heartbeat",
                   json={"lease_token": seeded.lease_token},
                   headers=_headers(module_master, "worker"))
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(("doc", "field"), TASK_CASES, ids=lambda v: str(v)[-40:])
def test_wrong_typed_task_fields_through_both_routes(module_master, seeded, http, doc, field):
    before = _counts(http)
    r = _post_raw(http, module_master, "admin", "/v1/batches", f'{{"tasks": [{doc}]}}')
    _check(r, 422, field)
    r = http.post("/v1/batches/upload", headers=_headers(module_master, "admin"),
                  files={"file": ("task.json", doc.encode())})
    _check(r, 422, field)
    assert _counts(http) == before


@pytest.mark.parametrize("query", [
    "/v1/episodes?app=a%00b", "/v1/batches?offset=9223372036854775808",
    "/v1/episodes?offset=9223372036854775808", "/v1/batches?limit=99999999999999999999",
    "/v1/episodes?batch_id=%00", "/v1/jobs/%00", "/v1/models?role=pl%00anner",
])
def test_bad_query_and_path_values(module_master, http, query):
    r = http.get(query, headers=_headers(module_master, "worker"))
    assert r.status_code == 422, r.text


@pytest.mark.parametrize(("body", "where"), [
    ("[" * 1500 + "]" * 1500, "file"),
    ('{"tasks": [' + "[" * 1500 + "]" * 1500 + "]}", "body"),
])
def test_deep_nesting_is_a_clear_4xx(module_master, http, body, where):
    h = _headers(module_master, "admin")
    if where == "file":
        r = http.post("/v1/batches/upload", headers=h, files={"file": ("deep.json", body)})
    else:
        r = http.post("/v1/batches", headers={**h, "Content-Type": "application/json"},
                      content=body)
    _check(r, 422, "nest")


@pytest.mark.parametrize(("name", "content", "field"), [
    ("nan.json", b'{"type": "KAlgebra", "sort": "VM", "instruction": "x", "steps": NaN}', "file"),
    ("nul.json", b'{"type": "KAlgebra", "sort": "VM", "instruction": "a\\u0000b"}', "file"),
    ("sur.json", b'{"type": "KAlgebra", "sort": "VM", "instruction": "a\\udc00"}', "file"),
    ("big.json", b'{"type": "KAlgebra", "sort": "VM", "instruction": "x", "steps": '
     + b"9" * 5000 + b"}", "file"),
    ("latin1.json", b'{"instruction": "caf\xe9"}', "UTF-8"),
    ("x" * 300 + ".json", json.dumps(example_tasks(1)[0]).encode(), "id"),
])
def test_bad_task_files(module_master, http, name, content, field):
    before = _counts(http)
    r = http.post("/v1/batches/upload", headers=_headers(module_master, "admin"),
                  files={"file": (name, content)})
    _check(r, 422, field)
    assert _counts(http) == before


def test_nul_in_the_uploaded_file_name(module_master, http):
    """Sent as raw multipart: httpx would escape the NUL."""
    doc = json.dumps(example_tasks(1)[0]).encode()
    body = (b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\x00b.json\"\r\n"
            b"Content-Type: application/json\r\n\r\n" + doc + b"\r\n--b--\r\n")
    before = _counts(http)
    r = http.post("/v1/batches/upload", content=body, headers={
        **_headers(module_master, "admin"), "Content-Type": "multipart/form-data; boundary=b"})
    _check(r, 422, "filename")
    assert _counts(http) == before


def test_bad_upload_form_fields(module_master, http):
    h = _headers(module_master, "admin")
    doc = json.dumps(example_tasks(1)[0]).encode()
    for data, field in (({"name": "a\x00b"}, "name"), ({"name": "n" * 201}, "name"),
                        ({"priority": "99999999999999999999"}, "priority"),
                        ({"rollouts": "NaN"}, "rollouts")):
        r = http.post("/v1/batches/upload", headers=h, files={"file": ("t.json", doc)},
                      data=data)
        _check(r, 422, field)


def test_group_ack_with_ready_is_refused(module_master, seeded, http):
    h = _headers(module_master, "worker")
    r = http.post(f"/v1/groups/{seeded.group_id}/ack", headers=h,
                  json={"lease_token": seeded.group_token, "status": "ready"})
    _check(r, 422, "status")
    r = http.post(f"/v1/groups/{seeded.group_id}/ack", headers=h,
                  json={"lease_token": seeded.group_token, "status": "leased"})
    _check(r, 422, "status")


def test_group_job_results_must_carry_a_valid_group(module_master, seeded, http):
    h = _headers(module_master, "worker")
    before = _counts(http)
    url = f"/v1/jobs/{seeded.group_job_id}/complete"
    for result, field in (({}, "group"), ({"info": "no group"}, "group"),
                          ({"group": {"state": 5}}, "state"),
                          ({"group": {"candidates": []}}, "candidates")):
        r = http.post(url, headers=h, json={"lease_token": seeded.group_job_token,
                                            "kind": "group", "result": result})
        _check(r, 422, field)
    # a result of another kind for this group job: refused naming the kind, nothing changed
    r = http.post(url, headers=h, json={"lease_token": seeded.group_job_token,
                                        "kind": "episode", "result": {"success": True}})
    _check(r, 422, "kind")
    assert _counts(http) == before
    job = http.get(f"/v1/jobs/{seeded.group_job_id}", headers=h).json()
    assert job["status"] == "leased"  # not marked succeeded


def test_step_attempt_is_the_leases(module_master, http):
    admin, worker = _headers(module_master, "admin"), _headers(module_master, "worker")
    wid = http.post("/v1/workers", headers=worker, json={"name": "attempts"}).json()["id"]
    http.post("/v1/batches", headers=admin,
              json={"name": "attempts", "tasks": example_tasks(1, "Lean")}).raise_for_status()
    [job] = http.post("/v1/jobs/lease", headers=worker, json={"worker_id": wid}).json()["jobs"]
    steps = f"/v1/jobs/{job['id']}/steps"
    r = http.post(steps, headers=worker,
                  json={"lease_token": job["lease_token"], "step": {"index": 0, "attempt": 7}})
    _check(r, 409, "attempt")
    # the judge's label is the master's to set; a screenshot names its screen's size
    for step, field in (({"index": 0, "label": "positive"}, "label"),
                        ({"index": 0, "screenshot": "sha256/ab/" + "a" * 64 + ".png"}, "screen"),
                        ({"index": 0, "screen": {"width": 0, "height": 9}}, "width"),
                        ({"index": 0, "extra": {"label": "positive"}}, "extra")):
        r = http.post(steps, headers=worker, json={"lease_token": job["lease_token"],
                                                   "step": step})
        _check(r, 422, field)
    for step in ({"index": 0, "thought": "named"}, {"index": 1, "attempt": 1}):
        r = http.post(steps, headers=worker, json={"lease_token": job["lease_token"],
                                                   "step": step})
        assert r.status_code == 204, r.text
    ep = http.get(f"/v1/episodes/{job['payload']['episode_id']}").json()
    assert [(s["index"], s["attempt"]) for s in ep["steps"]] == [(0, 1), (1, 1)]


@pytest.mark.parametrize(("data", "ctype"), [
    (image_bytes((1, 1), (255, 0, 0)), "application/json"), (b"{not json", "application/json"),
    (b'{"x": NaN}', "application/json"), (b"GIF89a", "image/png"), (b"<b>", "text/html"),
])
def test_artifacts_must_be_what_they_say(module_master, http, data, ctype):
    r = http.post("/v1/artifacts", headers=_headers(module_master, "worker"),
                  files={"file": ("a", data, ctype)})
    _check(r, 415, "file")


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/batches", b"{not json"), ("/v1/batches", b'{"tasks": NaN}'),
    ("/v1/jobs/lease", b"\x00\x01"), ("/v1/workers", b'{"name": "a\\u0000"}'),
    ("/v1/models", b"[" * 5000),
])
def test_auth_is_checked_before_the_body(module_master, http, path, body):
    r = http.post(path, content=body, headers={"Content-Type": "application/json"})
    _check(r, 401, None)
    r = http.post(path, content=body, headers={"Content-Type": "application/json",
                                               "Authorization": "Bearer wrong-token-12345"})
    _check(r, 401, None)


def test_a_large_body_without_a_token_is_refused_unread(module_master):
    """401 comes back although only the headers of a 35 MiB body were sent (a server waiting
    for the body would answer 408 after its 30 s body timeout, past this socket's timeout)."""
    with socket.create_connection(("127.0.0.1", module_master.port), timeout=20) as sock:
        sock.sendall(b"POST /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n{" % (35 * 2**20))
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
