"""A real master, fuzzed as a sequence of writes, each followed by reads of everything that
shows it: what the master takes, it can read back.

A Hypothesis state machine drives one master process (real Postgres and Redis, real HTTP).
Its rules write through every route that stores something: batches of real ScienceBoard
tasks, leases of every kind, step reports, completions with the result of the leased job's
kind, failures, judge and group jobs, groups, verdicts, group leases and acks, and any other
writing operation of the OpenAPI document. The typed parts of those bodies (a step, a result,
a group, a verdict, a payload) are drawn by schemathesis from the master's own component
schemas, mostly valid and sometimes not, and real ids are spliced in at any depth (a group's
``state.episode_id`` names a real episode) so the writes reach the code that stores them.
After every rule, every reading operation of the document answers for what is there: each
known episode (the replay too), batch, job and worker, the lists, the status, the training
views and the dashboard's HTML pages. No answer may be a 5xx, and each must be documented
(status, content type, body schema). The master's database persists across the runs, so later
runs read what earlier ones wrote (as a fuzzer finds a 500 "depending on what was written
before").

``CODA_FUZZ_RUNS`` (6) runs of ``CODA_FUZZ_STEPS`` (25) rules each; a failure names the
request (as curl) and the writes before it.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from schemathesis import GenerationMode

from coda.bounds import INT32_MAX, INT64_MAX, MAX_STEP_INDEX
from coda.logging import get_logger
from tests.fixtures.master import MasterProcess, Seeded, seed_master
from tests.fuzz.harness import operation_labels
from tests.fuzz.stateful import Exchange, component_strategies, exchange, send, splice

log = get_logger("tests.fuzz.stateful")
RUNS = int(os.environ.get("CODA_FUZZ_RUNS", 6))
STEPS = int(os.environ.get("CODA_FUZZ_STEPS", 25))
COMPONENTS = ("Step", "EpisodeResult", "JudgeJobResult", "GroupJobResult", "Group", "Verdict",
              "JudgeJobPayload", "GroupJobPayload", "TrainingMetricsReport")
TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
               max_size=50)
RESULT_OF = {"episode": "EpisodeResult", "judge": "JudgeJobResult", "group": "GroupJobResult"}
# writes the rules below make with drawn bodies of their own; every other writing operation
# is fuzzed whole by ``write_any_operation``
TYPED_WRITES = frozenset({
    "POST /v1/batches", "POST /v1/jobs/lease", "POST /v1/jobs/{job_id}/steps",
    "POST /v1/jobs/{job_id}/complete", "POST /v1/jobs/{job_id}/fail", "POST /v1/jobs",
    "POST /v1/groups", "PUT /v1/episodes/{episode_id}/verdict", "POST /v1/groups/lease",
    "POST /v1/groups/{group_id}/ack"})
# not fuzzed here: the admin clock (dev mode only) would age every lease of the run
UNTOUCHED = frozenset({"POST /v1/admin/clock"})
# query variants of the reads that filter (the default of each besides)
QUERIES: dict[str, list[dict[str, Any]]] = {
    "GET /v1/training/trajectories": [{"verdict": v} for v in ("correct", "incorrect", "any")],
    "GET /v1/episodes": [{"status": "completed"}],
}


@dataclass
class Leased:
    kind: str
    token: str
    episode_id: str | None


@dataclass
class Known:
    """What the master holds, as this test has seen it (across the runs)."""

    worker_ids: list[str] = field(default_factory=list)
    batch_ids: list[str] = field(default_factory=list)
    episode_ids: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    jobs: dict[str, Leased] = field(default_factory=dict)
    group_ids: list[str] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)
    artifact_keys: list[str] = field(default_factory=list)

    def seeds(self) -> dict[str, list[Any]]:
        tokens = [j.token for j in self.jobs.values()] + list(self.groups.values())
        return {k: v for k, v in {
            "episode_id": self.episode_ids, "batch_id": self.batch_ids,
            "worker_id": self.worker_ids, "job_id": self.job_ids, "group_id": self.group_ids,
            "key": self.artifact_keys, "screenshot": self.artifact_keys,
            "ref": self.artifact_keys,
            "lease_token": tokens}.items() if v}

    def learn(self, body: Any) -> None:
        """Remember the ids an answer names."""
        if not isinstance(body, dict):
            return
        if isinstance(body.get("batch"), dict):
            self.batch_ids.append(body["batch"]["id"])
            self.episode_ids += body.get("episode_ids", [])
        for job in body.get("jobs", []) if isinstance(body.get("jobs"), list) else []:
            payload = job.get("payload") or {}
            self.jobs[job["id"]] = Leased(job["kind"], job["lease_token"],
                                          payload.get("episode_id"))
            self.job_ids.append(job["id"])
        for item in body.get("items", []) if isinstance(body.get("items"), list) else []:
            if isinstance(item, dict) and "group" in item and item.get("lease_token"):
                self.groups[item["id"]] = item["lease_token"]
                self.group_ids.append(item["id"])
        if isinstance(body.get("key"), str):
            self.artifact_keys.append(body["key"])


@dataclass
class Context:
    """The running master and what the machine needs of it (one per test module)."""

    url: str
    openapi: dict[str, Any]
    schema: Any
    headers: dict[str, str]
    task_docs: list[dict[str, Any]]
    valid: dict[str, st.SearchStrategy[Any]]
    invalid: dict[str, st.SearchStrategy[Any]]
    reads: list[str]
    writes: list[str]
    known: Known
    session: requests.Session = field(default_factory=requests.Session)
    log: list[Exchange] = field(default_factory=list)


class MasterMachine(RuleBasedStateMachine):
    ctx: ClassVar[Context]

    def __init__(self) -> None:
        super().__init__()
        self.touched: list[str] = []  # episodes this rule wrote to: read back first

    # sending --------------------------------------------------------------------------------

    def send(self, label: str, *, path: dict[str, Any] | None = None,
             query: dict[str, Any] | None = None, body: Any = None) -> Exchange:
        ctx = self.ctx
        got = exchange(ctx.schema, ctx.session, ctx.url, label, headers=ctx.headers,
                       path_parameters=path, query=query, body=body)
        ctx.log.append(got)
        assert got.problem is None, self.report(got)
        ctx.known.learn(got.body)
        return got

    def report(self, failed: Exchange) -> str:
        writes = [e for e in self.ctx.log[:-1] if not e.label.startswith("GET")][-8:]
        return "\n\n".join([str(failed), "the writes before it:", *map(str, writes)])

    def body(self, data: st.DataObject, component: str) -> Any:
        """A drawn value of a component: valid half of the time (without NUL characters: the
        master refuses them anywhere, tested on its own), valid but for one integer pushed to
        or past what storage and readers hold a quarter of the time, else schema-violating."""
        how = data.draw(st.sampled_from(["valid", "valid", "pushed", "invalid"]))
        if how == "invalid":
            value = data.draw(self.ctx.invalid[component].filter(_is_json))
            return splice(value, self.ctx.known.seeds(), data.draw)
        seeds = self.ctx.known.seeds()
        value = without_nul(data.draw(self.ctx.valid[component]))
        value = repaired(splice(value, seeds, data.draw, always=REAL))
        return pushed(value, data.draw) if how == "pushed" else value

    def settle(self, job_id: str, got: Exchange, *, done: bool = False) -> None:
        """Forget a job whose lease this test no longer holds (finished, or taken back)."""
        if got.status == 409 or (done and got.status is not None and got.status < 300):
            self.ctx.known.jobs.pop(job_id, None)

    def episode(self, data: st.DataObject) -> str:
        return str(data.draw(st.sampled_from(self.ctx.known.episode_ids)))

    def job(self, data: st.DataObject, kind: str) -> tuple[str, Leased]:
        """A job of ``kind`` this test holds the lease of: leased now if none is held (an
        episode job of a new batch if none is queued; an episode job when no job of ``kind``
        is queued)."""
        known = self.ctx.known
        for want in (kind, "episode"):
            held = sorted((i, j) for i, j in known.jobs.items() if j.kind == want)
            if not held:
                self.lease(want, 1)
            if not held and want == "episode" and not any(
                    j.kind == want for j in known.jobs.values()):
                self.submit_batch(data)
                self.lease(want, 1)
            held = sorted((i, j) for i, j in known.jobs.items() if j.kind == want)
            if held:
                return data.draw(st.sampled_from(held))  # type: ignore[no-any-return]
        raise AssertionError("a new batch's episode job could not be leased: "
                             + self.report(self.ctx.log[-1]))

    # writes ---------------------------------------------------------------------------------

    @rule(data=st.data(), kind=st.sampled_from(["episode", "judge", "group"]))
    def advance_a_job(self, data: st.DataObject, kind: str) -> None:
        """Take a job of ``kind`` one stage on: an episode gets its steps, and any job is
        completed with a drawn result of its kind (the way through the lifecycle: a judged
        episode's positive steps become group jobs, a group job's result a group)."""
        job_id, job = self.job(data, kind)
        if job.kind == "episode":
            for _ in range(data.draw(st.integers(1, 3))):
                self._report_step(data, job_id, job)
        self._complete(data, job_id, job)

    @rule(data=st.data())
    def submit_batch(self, data: st.DataObject) -> None:
        docs = self.ctx.task_docs
        picked = data.draw(st.lists(st.sampled_from(range(len(docs))), min_size=1, max_size=2,
                                    unique=True))
        self.send("POST /v1/batches", body={
            "tasks": [docs[i] for i in picked], "rollouts": data.draw(st.integers(1, 2)),
            "group_size": data.draw(st.integers(0, 3)),
            "judge": data.draw(st.sampled_from(["always", "no_checker", "never"])),
            "label_rule": data.draw(st.sampled_from(["clean_only", "before_first_error"]))})

    @rule(kind=st.sampled_from(["episode", "judge", "group"]), capacity=st.integers(1, 3))
    def lease(self, kind: str, capacity: int) -> None:
        worker = self.ctx.known.worker_ids[0]
        self.send("POST /v1/jobs/lease", body={"worker_id": worker, "kind": kind,
                                              "capacity": capacity})

    @rule(data=st.data())
    def report_step(self, data: st.DataObject) -> None:
        self._report_step(data, *self.job(data, "episode"))

    def _report_step(self, data: st.DataObject, job_id: str, job: Leased) -> None:
        step = self.body(data, "Step")
        if isinstance(step, dict):
            step.pop("label", None)  # the master's to set: a report with one is refused
            if data.draw(st.integers(0, 3)):
                step.pop("attempt", None)  # the lease's attempt, unless drawn
        self.touched.append(job.episode_id or "")
        self.settle(job_id, self.send("POST /v1/jobs/{job_id}/steps", path={"job_id": job_id},
                                      body={"lease_token": job.token, "step": step}))

    @rule(data=st.data(), kind=st.sampled_from(["episode", "judge", "group"]))
    def complete(self, data: st.DataObject, kind: str) -> None:
        self._complete(data, *self.job(data, kind))

    def _complete(self, data: st.DataObject, job_id: str, job: Leased) -> None:
        result = self.body(data, RESULT_OF[job.kind])
        self.settle(job_id, self.send(
            "POST /v1/jobs/{job_id}/complete", path={"job_id": job_id},
            body={"lease_token": job.token, "kind": job.kind, "result": result}), done=True)
        self.touched += [job.episode_id or "", *_episodes_in(result)]

    @rule(data=st.data(), kind=st.sampled_from(["episode", "judge", "group"]))
    def fail(self, data: st.DataObject, kind: str) -> None:
        job_id, job = self.job(data, kind)
        self.settle(job_id, self.send("POST /v1/jobs/{job_id}/fail", path={"job_id": job_id},
                                      body={"lease_token": job.token, "retry": data.draw(
                                          st.booleans()), "error": data.draw(TEXT)}), done=True)
        self.touched.append(job.episode_id or "")

    @rule(data=st.data(), kind=st.sampled_from(["judge", "group"]))
    def create_job(self, data: st.DataObject, kind: str) -> None:
        payload = self.body(data, "JudgeJobPayload" if kind == "judge" else "GroupJobPayload")
        self.send("POST /v1/jobs", body={"kind": kind, "payload": payload})

    @rule(data=st.data())
    def create_group(self, data: st.DataObject) -> None:
        group = self.body(data, "Group")
        self.touched += _episodes_in(group)
        self.send("POST /v1/groups", body={"group": group})

    @rule(data=st.data())
    def set_verdict(self, data: st.DataObject) -> None:
        episode = self.episode(data)
        self.touched.append(episode)
        self.send("PUT /v1/episodes/{episode_id}/verdict", path={"episode_id": episode},
                  body=self.body(data, "Verdict"))

    @rule(data=st.data())
    def lease_and_ack_groups(self, data: st.DataObject) -> None:
        self.send("POST /v1/groups/lease", body={"max_groups": data.draw(st.integers(1, 3))})
        held = sorted(self.ctx.known.groups.items())
        if held:
            group_id, token = data.draw(st.sampled_from(held))
            got = self.send("POST /v1/groups/{group_id}/ack", path={"group_id": group_id},
                            body={"lease_token": token, "status": data.draw(
                                st.sampled_from(["consumed", "dropped"]))})
            if got.status == 204:
                self.ctx.known.groups.pop(group_id, None)

    @rule(data=st.data())
    def report_training(self, data: st.DataObject) -> None:
        self.send("POST /v1/training/metrics", body=self.body(data, "TrainingMetricsReport"))

    @rule(data=st.data())
    def write_any_operation(self, data: st.DataObject) -> None:
        """Any other writing operation, its whole request drawn from the document."""
        ctx = self.ctx
        label = data.draw(st.sampled_from(ctx.writes))
        mode = data.draw(st.sampled_from([GenerationMode.POSITIVE] * 3
                                         + [GenerationMode.NEGATIVE]))
        operation = ctx.schema.find_operation_by_label(label)
        case = data.draw(operation.as_strategy(generation_mode=mode))
        seeds = ctx.known.seeds()
        for name, values in seeds.items():
            if name in case.path_parameters and data.draw(st.booleans()):
                case.path_parameters[name] = data.draw(st.sampled_from(values))
        if isinstance(case.body, dict | list):
            case.body = splice(case.body, seeds, data.draw)
        case.headers = {**{k: v for k, v in (case.headers or {}).items()
                           if k.lower() != "authorization"}, **ctx.headers}
        got = send(case, label, ctx.session, ctx.url)
        ctx.log.append(got)
        assert got.problem is None, self.report(got)
        ctx.known.learn(got.body)

    # reads ----------------------------------------------------------------------------------

    @invariant()
    def everything_reads_back(self) -> None:
        """Every reading operation answers for what is there, as documented."""
        ctx, known = self.ctx, self.ctx.known
        rng = random.Random(len(ctx.log))
        episodes = list(dict.fromkeys([e for e in self.touched if e in known.episode_ids]
                                      + rng.sample(known.episode_ids,
                                                   min(2, len(known.episode_ids)))))
        self.touched = []
        values = {"episode_id": episodes,
                  "batch_id": known.batch_ids[-1:], "job_id": known.job_ids[-2:],
                  "worker_id": known.worker_ids[:1], "key": known.artifact_keys[-1:],
                  "group_id": known.group_ids[-1:]}
        for label in ctx.reads:
            names = _path_names(label)
            combos = [{}] if not names else [
                {names[0]: v} for v in values.get(names[0], [])]
            for path in combos:
                for query in [None, *QUERIES.get(label, [])]:
                    self.send(label, path=path or None, query=query)
        for episode in episodes:  # the dashboard's pages (HTML, outside the document)
            for page in ("/", f"/episodes/{episode}"):
                r = ctx.session.get(ctx.url + page, headers=ctx.headers, timeout=60)
                assert r.status_code < 500, f"GET {page} -> {r.status_code}: {r.text[:1500]}"


def without_nul(value: Any) -> Any:
    """``value`` with every NUL character removed from its strings and keys."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    return value


def repaired(value: Any) -> Any:
    """A valid draw made to keep the rules across fields that a JSON schema does not state
    (the contracts' model validators): a step's screenshot comes with its screen size, a
    candidate's log-probabilities with token ids of the same length, an image reference is
    a key or inline bytes, not both or neither."""
    if isinstance(value, list):
        return [repaired(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: repaired(v) for k, v in value.items()}
    if "index" in out and out.get("screenshot") is not None and out.get("screen") is None:
        out["screen"] = {"width": 1280, "height": 800}
    logprobs, ids = out.get("logprobs"), out.get("token_ids")
    if logprobs is not None and (ids is None or len(ids) != len(logprobs)):
        out["logprobs"] = None
    for key in ("screenshot", "previous_screenshot"):
        image = out.get(key)
        if isinstance(image, dict) and set(image) <= {"ref", "b64"}:
            if image.get("ref") is not None:
                out[key] = {"ref": image["ref"]}
            elif image.get("b64") is not None:
                out[key] = {"b64": image["b64"]}
            else:
                out[key] = None
    return out


REAL = frozenset({"episode_id"})
"""Fields a valid draw always takes from what the master holds (a group's state names a real
episode, so the episode's replay shows the group)."""
EDGES = (0, MAX_STEP_INDEX, MAX_STEP_INDEX + 1, INT32_MAX, INT32_MAX + 1, -INT32_MAX - 2,
         INT64_MAX, INT64_MAX + 1, 32589158477190044731)
"""Integers at and past the bounds storage and readers hold (a step index, a PostgreSQL
integer, a bigint) and the step index a fuzzer once had stored: each is refused at the write
or read back."""


def pushed(value: Any, draw: Any) -> Any:
    """``value`` with the integers of one of its fields (any depth; the field drawn among
    the names that hold integers) replaced by one of :data:`EDGES`: what a schema without a
    bound (or with one past its readers') lets through to storage, and readers then fail on."""
    names: set[str] = set()

    def collect(v: Any, name: str | None) -> None:
        if isinstance(v, int) and not isinstance(v, bool) and name is not None:
            names.add(name)
        elif isinstance(v, dict):
            for k, item in v.items():
                collect(item, k)
        elif isinstance(v, list):
            for item in v:
                collect(item, name)

    collect(value, None)
    if not names:
        return value
    field_name, edge = draw(st.sampled_from(sorted(names))), draw(st.sampled_from(EDGES))

    def push(v: Any, name: str | None) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and name == field_name:
            return edge
        if isinstance(v, dict):
            return {k: push(item, k) for k, item in v.items()}
        if isinstance(v, list):
            return [push(item, name) for item in v]
        return v

    return push(value, None)


def _is_json(value: Any) -> bool:
    """Whether a drawn body can be sent as JSON (a negative draw may be raw bytes: the
    per-operation fuzzer sends those)."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _path_names(label: str) -> list[str]:
    path = label.split(" ", 1)[1]
    return [part[1:-1].split(":")[0] for part in path.split("/") if part.startswith("{")]


def _episodes_in(value: Any) -> list[str]:
    """The ``episode_id`` values anywhere in a drawn body."""
    if isinstance(value, list):
        return [e for v in value for e in _episodes_in(v)]
    if not isinstance(value, dict):
        return []
    own = [value["episode_id"]] if isinstance(value.get("episode_id"), str) else []
    return own + [e for v in value.values() for e in _episodes_in(v)]


@pytest.fixture(scope="module")
def context(module_master: MasterProcess) -> Iterator[Context]:
    seeded: Seeded = seed_master(module_master)
    openapi = httpx.get(f"{module_master.url}/openapi.json", timeout=30).json()
    labels = operation_labels(openapi)
    known = Known(worker_ids=[seeded.worker_id], batch_ids=[seeded.batch_id],
                  episode_ids=[seeded.episode_id], job_ids=[seeded.job_id, seeded.group_job_id],
                  group_ids=[seeded.group_id], artifact_keys=[seeded.artifact_key])
    ctx = Context(
        url=module_master.url, openapi=openapi, schema=schemathesis.openapi.from_dict(openapi),
        headers={"Authorization": f"Bearer {module_master.admin_token}"},
        task_docs=seeded.task_docs, valid=component_strategies(openapi, COMPONENTS),
        invalid=component_strategies(openapi, COMPONENTS, GenerationMode.NEGATIVE),
        reads=[lb for lb in labels if lb.startswith("GET ")],
        writes=[lb for lb in labels if not lb.startswith("GET ")
                and lb not in TYPED_WRITES | UNTOUCHED], known=known)
    yield ctx
    ctx.session.close()


def test_every_operation_is_written_or_read(context: Context) -> None:
    labels = set(operation_labels(context.openapi))
    assert labels >= TYPED_WRITES
    assert labels == set(context.reads) | set(context.writes) | TYPED_WRITES | (UNTOUCHED & labels)
    assert "GET /v1/episodes/{episode_id}/replay" in context.reads


def test_what_the_master_takes_it_reads_back(context: Context) -> None:
    MasterMachine.ctx = context
    run_state_machine_as_test(MasterMachine, settings=settings(
        max_examples=RUNS, stateful_step_count=STEPS, deadline=None, database=None,
        derandomize=True, phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck)))
    writes = [e for e in context.log if not e.label.startswith("GET")]
    stored = [e for e in writes if e.status is not None and e.status < 300]
    tally = Counter(f"{e.label} {e.status}" for e in context.log)
    log.info("fuzz.stateful.done", requests=len(context.log), tally=dict(sorted(tally.items())))
    # the writes reached the code that stores things, and everything was read back
    assert len(stored) >= RUNS * STEPS // 4, tally
    assert {e.label for e in stored} >= {
        "POST /v1/batches", "POST /v1/jobs/lease", "POST /v1/jobs/{job_id}/steps",
        "POST /v1/jobs/{job_id}/complete", "POST /v1/groups"}
