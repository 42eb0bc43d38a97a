"""Typed async client of the master's REST API."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import TypeAdapter

from coda.clients.base import JsonClient
from coda.contracts.desktop import ProviderState
from coda.contracts.jobs import Job, JobResult
from coda.contracts.master_api import (
    ArtifactRef,
    BatchCreate,
    BatchCreated,
    BatchList,
    GroupAck,
    GroupCreate,
    GroupCreated,
    GroupJobCreate,
    GroupLeaseRequest,
    GroupList,
    JobComplete,
    JobCreated,
    JobFail,
    JobHeartbeatResponse,
    JobRelease,
    JobState,
    JobStepReport,
    JudgeJobCreate,
    LeaseHeartbeats,
    LeaseHeartbeatsResponse,
    LeaseRef,
    LeaseRequest,
    LeaseResponse,
    LeaseToken,
    ModelVersionList,
    StatusReport,
    StepReport,
    StepReports,
    StepReportsResponse,
    VersionRateList,
    WorkerHeartbeat,
    WorkerRegister,
    WorkerTokenInfo,
    WorkerTokenRevoked,
)
from coda.contracts.records import Batch, Episode, JobKind, JudgedTrajectoryList, Step, Worker
from coda.contracts.training import (
    Group,
    GroupStatus,
    ModelRole,
    ModelVersion,
    ModelVersionCreate,
    TrainingMetricsList,
    TrainingMetricsReport,
    Verdict,
    VersionTraining,
)

JOB_COMPLETE: TypeAdapter[JobComplete] = TypeAdapter(JobComplete)
IDEMPOTENCY_KEY = "idempotency-key"


def once(key: str | None = None) -> dict[str, dict[str, str]]:
    """The headers of a request the master must do once however often it is sent: an
    ``Idempotency-Key`` (``key``, else a new random one) that every retry of the call reuses."""
    return {"headers": {IDEMPOTENCY_KEY: key or uuid.uuid4().hex}}


class MasterClient(JsonClient):
    """``async with MasterClient(url, token=...) as m: await m.create_batch(...)``.

    Calls that create or hand out something (a batch, a job, a lease) carry an
    ``Idempotency-Key`` that their retries reuse: a retry after an answer lost on the way
    gets what the first try made, never a second batch or lease."""

    # batches and episodes
    async def create_batch(self, spec: BatchCreate, *, key: str | None = None) -> BatchCreated:
        """Create a batch once: ``key`` (default: a new one) makes every retry, and a later
        call with the same key, return the batch the first one created."""
        return await self.request("POST", "/v1/batches", spec, BatchCreated, **once(key))

    async def list_batches(self, *, limit: int = 50, offset: int = 0) -> BatchList:
        return await self.request("GET", "/v1/batches", None, BatchList,
                                  params={"limit": limit, "offset": offset})

    async def get_batch(self, batch_id: uuid.UUID) -> Batch:
        return await self.request("GET", f"/v1/batches/{batch_id}", None, Batch)

    async def cancel_batch(self, batch_id: uuid.UUID) -> Batch:
        return await self.request("POST", f"/v1/batches/{batch_id}/cancel", None, Batch)

    async def batch_versions(self, batch_id: uuid.UUID) -> VersionRateList:
        return await self.request("GET", f"/v1/batches/{batch_id}/versions", None,
                                  VersionRateList)

    async def get_episode(self, episode_id: uuid.UUID, *, steps: bool = True) -> Episode:
        return await self.request("GET", f"/v1/episodes/{episode_id}", None, Episode,
                                  params={"steps": str(steps).lower()})

    # workers and jobs
    async def register_worker(self, spec: WorkerRegister) -> Worker:
        return await self.request("POST", "/v1/workers", spec, Worker)

    async def worker_heartbeat(self, worker_id: uuid.UUID, busy_slots: int = 0,
                               provider: ProviderState | None = None) -> Worker:
        return await self.request("POST", f"/v1/workers/{worker_id}/heartbeat",
                                  WorkerHeartbeat(busy_slots=busy_slots, provider=provider),
                                  Worker)

    async def worker_tokens(self) -> list[WorkerTokenInfo]:
        """The master's worker tokens by fingerprint (admin)."""
        resp = await self.send("GET", "/v1/admin/worker-tokens", None)
        return [WorkerTokenInfo.model_validate(t) for t in resp.json()]

    async def revoke_worker_token(self, fingerprint: str) -> WorkerTokenRevoked:
        """Revoke the worker token of ``fingerprint`` (admin; ``master.tokens``)."""
        return await self.request("DELETE", f"/v1/admin/worker-tokens/{fingerprint}", None,
                                  WorkerTokenRevoked)

    async def lease(self, worker_id: uuid.UUID, kind: JobKind = JobKind.EPISODE, *,
                    capacity: int = 1, wait_s: float = 0.0) -> list[Job]:
        req = LeaseRequest(worker_id=worker_id, kind=kind, capacity=capacity, wait_s=wait_s)
        return (await self.request("POST", "/v1/jobs/lease", req, LeaseResponse,
                                   **once())).jobs

    async def heartbeat(self, job: Job) -> JobHeartbeatResponse:
        return await self.request("POST", f"/v1/jobs/{job.id}/heartbeat",
                                  LeaseToken(lease_token=job.lease_token), JobHeartbeatResponse)

    async def heartbeat_leases(self, jobs: list[Job]) -> LeaseHeartbeatsResponse:
        """Extend the leases of all ``jobs`` in one call (at most ``HEARTBEAT_BATCH_MAX``):
        each comes back ``extended`` or ``lost``, in order."""
        body = LeaseHeartbeats(leases=[LeaseRef(job_id=j.id, lease_token=j.lease_token)
                                       for j in jobs])
        return await self.request("POST", "/v1/jobs/heartbeat", body, LeaseHeartbeatsResponse)

    async def report_step(self, job: Job, step: Step) -> None:
        """One step report through the single-report route (the master stores it as a batch of
        one; a 409 when the lease is lost or refuses it, a 422 when it sets ``step.label``)."""
        await self.send("POST", f"/v1/jobs/{job.id}/steps",
                        StepReport(lease_token=job.lease_token, step=step))

    async def report_steps(self, reports: list[tuple[Job, Step]]) -> StepReportsResponse:
        """Store the steps of several jobs in one call (at most ``STEP_BATCH_MAX``): each
        comes back ``stored``, ``lost`` or ``refused``, in order."""
        body = StepReports(reports=[JobStepReport(job_id=j.id, lease_token=j.lease_token,
                                                  step=s) for j, s in reports])
        return await self.request("POST", "/v1/jobs/steps", body, StepReportsResponse)

    async def complete(self, job: Job, result: JobResult) -> None:
        """Finish ``job`` with the result of its kind (a result of another kind is refused
        here, before it is sent)."""
        body = JOB_COMPLETE.validate_python(
            {"lease_token": job.lease_token, "kind": job.kind, "result": result})
        await self.send("POST", f"/v1/jobs/{job.id}/complete", body)

    async def fail(self, job: Job, error: str, *, retry: bool = True) -> JobState:
        return await self.request("POST", f"/v1/jobs/{job.id}/fail",
                                  JobFail(lease_token=job.lease_token, error=error, retry=retry),
                                  JobState)

    async def release(self, job: Job, reason: str) -> JobState:
        """Give ``job`` back without counting its attempt: a fault of this worker's
        infrastructure (its desktop provider), not of the job."""
        return await self.request("POST", f"/v1/jobs/{job.id}/release",
                                  JobRelease(lease_token=job.lease_token, reason=reason[:2000]),
                                  JobState)

    async def get_job(self, job_id: uuid.UUID) -> JobState:
        return await self.request("GET", f"/v1/jobs/{job_id}", None, JobState)

    async def create_job(self, spec: JudgeJobCreate | GroupJobCreate, *,
                         key: str | None = None) -> JobCreated:
        return await self.request("POST", "/v1/jobs", spec, JobCreated, **once(key))

    # artifacts
    async def upload_artifact(self, data: bytes, content_type: str = "image/png") -> ArtifactRef:
        resp = await self.send("POST", "/v1/artifacts", None,
                               files={"file": ("artifact", data, content_type)})
        return ArtifactRef.model_validate_json(resp.content)

    async def get_artifact(self, key: str) -> bytes:
        return (await self.send("GET", f"/v1/artifacts/{key}")).content

    # training groups and model versions
    async def create_group(self, group: Group) -> uuid.UUID:
        resp = await self.send("POST", "/v1/groups", GroupCreate(group=group))
        return GroupCreated.model_validate_json(resp.content).id

    async def lease_groups(self, req: GroupLeaseRequest) -> GroupList:
        return await self.request("POST", "/v1/groups/lease", req, GroupList, **once())

    async def ack_group(self, group_id: uuid.UUID, token: str,
                        status: GroupStatus = GroupStatus.CONSUMED) -> None:
        await self.send("POST", f"/v1/groups/{group_id}/ack",
                        GroupAck(lease_token=token, status=status))

    async def register_version(self, spec: ModelVersionCreate) -> ModelVersion:
        return await self.request("POST", "/v1/models", spec, ModelVersion)

    async def list_versions(self, role: ModelRole | None = None) -> ModelVersionList:
        params = {"role": role.value} if role else None
        return await self.request("GET", "/v1/models", None, ModelVersionList, params=params)

    async def current_version(self, role: ModelRole = ModelRole.PLANNER) -> ModelVersion:
        return await self.request("GET", "/v1/models/current", None, ModelVersion,
                                  params={"role": role.value})

    # training observability and judged trajectories
    async def report_training(self, report: TrainingMetricsReport) -> None:
        await self.send("POST", "/v1/training/metrics", report)

    async def training_metrics(self, *, run: str | None = None,
                               planner_version: str | None = None,
                               limit: int = 1000) -> TrainingMetricsList:
        params: dict[str, Any] = {"limit": limit}
        if run:
            params["run"] = run
        if planner_version:
            params["planner_version"] = planner_version
        return await self.request("GET", "/v1/training/metrics", None, TrainingMetricsList,
                                  params=params)

    async def training_by_version(self, run: str | None = None) -> list[VersionTraining]:
        resp = await self.send("GET", "/v1/training/versions", None,
                               params={"run": run} if run else None)
        return [VersionTraining.model_validate(v) for v in resp.json()]

    async def set_verdict(self, episode_id: uuid.UUID, verdict: Verdict) -> None:
        await self.send("PUT", f"/v1/episodes/{episode_id}/verdict", verdict)

    async def judged_trajectories(self, *, app: str | None = None,
                                  batch_id: uuid.UUID | None = None,
                                  planner_version: str | None = None,
                                  verdict: str = "correct", limit: int = 100,
                                  offset: int = 0) -> JudgedTrajectoryList:
        params: dict[str, Any] = {"limit": limit, "offset": offset, "verdict": verdict}
        for key, value in (("app", app), ("batch_id", batch_id),
                           ("planner_version", planner_version)):
            if value is not None:
                params[key] = str(value)
        return await self.request("GET", "/v1/training/trajectories", None,
                                  JudgedTrajectoryList, params=params)

    async def status(self) -> StatusReport:
        return await self.request("GET", "/v1/status", None, StatusReport)

    async def status_of(self, batch_id: uuid.UUID) -> StatusReport:
        """The status report with the Table 1 scores of ``batch_id``."""
        return await self.request("GET", "/v1/status", None, StatusReport,
                                  params={"batch_id": str(batch_id)})
