"""The whole OpenAPI surface of a real master, fuzzed: schema-valid and schema-violating
requests, as admin, worker and anonymous, with real resources seeded (a registered worker,
live lease tokens of an episode job, a group job and a group, batches of real ScienceBoard
documents, an artifact, a model version). No request may get a 5xx, an undocumented status
or content type, or a body that does not match the documented schema."""

from __future__ import annotations

import httpx
import pytest

from master.app import create_app
from master.settings import MasterSettings
from tests.fixtures.master import MasterProcess, Seeded, seed_master
from tests.fuzz.harness import FuzzTarget, fuzz_operation, operation_labels

# The operations are listed from the app itself (no server needed to collect the tests).
OPERATIONS = operation_labels(create_app(MasterSettings(dev=True), migrate=False).openapi())


@pytest.fixture(scope="module")
def target(module_master: MasterProcess) -> FuzzTarget:
    seeded: Seeded = seed_master(module_master)
    openapi = httpx.get(f"{module_master.url}/openapi.json", timeout=30).json()
    lease_tokens = [seeded.lease_token, seeded.group_job_token, seeded.group_token]
    return FuzzTarget(
        base_url=module_master.url, openapi=openapi,
        auth={"admin": {"Authorization": f"Bearer {module_master.admin_token}"},
              "worker": {"Authorization": f"Bearer {module_master.worker_token}"},
              "anonymous": {}},
        seeds={"job_id": [seeded.job_id, seeded.group_job_id],
               "worker_id": [seeded.worker_id], "batch_id": [seeded.batch_id],
               "episode_id": [seeded.episode_id], "group_id": [seeded.group_id],
               "key": [seeded.artifact_key], "lease_token": lease_tokens,
               "tasks": [seeded.task_docs]})


def test_every_operation_is_fuzzed() -> None:
    assert len(OPERATIONS) >= 25 and "POST /v1/batches/upload" in OPERATIONS


@pytest.mark.parametrize("operation", OPERATIONS)
def test_no_server_error_and_responses_as_documented(target: FuzzTarget, operation: str):
    failures = fuzz_operation(target, operation)
    assert not failures, "\n\n".join(str(f) for f in failures[:5])
