"""The worker side of the queue: lease (long-poll), heartbeat, step reports, complete, fail."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from fastapi import APIRouter, HTTPException, Request, Response, status

from coda.contracts.jobs import Job
from coda.contracts.master_api import (
    JobComplete,
    JobCreate,
    JobCreated,
    JobFail,
    JobHeartbeatResponse,
    JobRelease,
    JobState,
    JobStepReport,
    LeaseBeat,
    LeaseHeartbeats,
    LeaseHeartbeatsResponse,
    LeaseRequest,
    LeaseResponse,
    LeaseToken,
    StepReport,
    StepReportOutcome,
    StepReports,
    StepReportsResponse,
)
from coda.contracts.records import Step
from coda.service import error_responses
from master import idempotency, jobs, tokens
from master.auth import Admin, Reader, WorkerAuth
from master.errors import LeaseLost, StepRefused
from master.idempotency import IdempotencyKey
from master.repos import jobs as job_rows
from master.repos.jobs import NewJob
from master.shedding import idle, keeps_work
from master.state import AppState, State

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

@router.post("", status_code=201)
async def create_job(body: JobCreate, core: State, _: Admin, response: Response,
                     key: IdempotencyKey = None) -> JobCreated:
    """Enqueue a judge or group job, its payload typed by its kind (episode jobs are created
    by batches: ``/v1/batches``). A retry with the same ``Idempotency-Key`` gets the job the
    first request created."""
    job = NewJob(id=uuid.uuid4(), kind=body.kind, payload=body.payload.model_dump(mode="json"),
                 priority=body.priority, max_attempts=body.max_attempts)
    earlier = await jobs.enqueue(core.pg, core.queue, [job], key=key,
                                 digest=idempotency.digest(body.model_dump(mode="json")))
    if earlier is not None:
        idempotency.replayed(response)
        return JobCreated.model_validate(earlier)
    return JobCreated(id=job.id, kind=job.kind)


@router.post("/lease", responses=error_responses(404))
async def lease_jobs(body: LeaseRequest, core: State, _: WorkerAuth, request: Request,
                     response: Response, key: IdempotencyKey = None) -> LeaseResponse:
    """Lease up to ``capacity`` jobs of one kind, waiting up to ``wait_s`` when none is ready
    (a master that is stopping answers at once, with no job). A retry with the same
    ``Idempotency-Key`` gets the jobs the first request leased (those it still holds) instead
    of leasing more: an answer lost on the way costs no attempt."""
    if not await core.known_workers.registered(core.pg, body.worker_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"worker {body.worker_id} is not registered")
    digest = idempotency.digest(body.model_dump(mode="json"))
    if key is not None:
        earlier = await idempotency.earlier(core.pg, "jobs.lease", key, digest)
        if earlier is not None:
            idempotency.replayed(response)
            return LeaseResponse(jobs=await jobs.leased_again(
                core.pg, [(uuid.UUID(i), t) for i, t in earlier["leases"]]))
    got = await _lease(body, core, request)
    if key is not None and got:
        await idempotency.keep(core.pg, "jobs.lease", key, digest,
                               {"leases": [[str(j.id), j.lease_token] for j in got]})
    return LeaseResponse(jobs=got)


async def _lease(body: LeaseRequest, core: AppState, request: Request) -> list[Job]:
    s = core.settings
    deadline = time.monotonic() + body.wait_s  # how long this request waits: real time
    waiting = False
    try:
        while True:
            got = await jobs.lease(core.pg, core.queue, core.clock, worker_id=body.worker_id,
                                   kind=body.kind, capacity=body.capacity, ttl_s=s.lease_ttl_s)
            if got or time.monotonic() >= deadline or core.stopping.is_set():
                break
            if core.metrics and not waiting:  # the gauge tests wait on instead of sleeping
                core.metrics.lease_polls.inc()
                waiting = True
            # waiting costs nothing: the request gives its turn up meanwhile (shedding)
            with contextlib.suppress(TimeoutError):
                async with idle(request.scope):
                    await asyncio.wait_for(core.stopping.wait(), timeout=min(
                        s.long_poll_step_s, max(0.0, deadline - time.monotonic())))
    finally:
        if core.metrics and waiting:
            core.metrics.lease_polls.dec()
    # a worker token revoked during this long poll: what it got goes back at once
    got = await tokens.unless_revoked(core.pg, core.queue, core.auth,
                                      request.headers.get("authorization"), got)
    if core.metrics and got:
        core.metrics.jobs_leased.labels(body.kind.value).inc(len(got))
    return got


@router.post("/heartbeat")
@keeps_work
async def heartbeat_leases(body: LeaseHeartbeats, core: State,
                           _: WorkerAuth) -> LeaseHeartbeatsResponse:
    """Extend every lease a worker holds in one call (one call per worker and heartbeat
    period, not one per job): each lease is ``extended`` or ``lost`` (stop working on it),
    in the order sent."""
    leases = [(ref.job_id, ref.lease_token) for ref in body.leases]
    beats = await jobs.heartbeat_many(core.pg, core.queue, core.clock, leases=leases,
                                      ttl_s=core.settings.lease_ttl_s)
    return LeaseHeartbeatsResponse(leases=[
        LeaseBeat(job_id=job_id, outcome="extended", lease_expires_at=expires)
        if expires is not None else LeaseBeat(job_id=job_id, outcome="lost", status=status)
        for (job_id, _token), (expires, status) in zip(leases, beats, strict=True)])


@router.post("/{job_id}/heartbeat", responses=error_responses(404, 409))
@keeps_work
async def heartbeat_job(job_id: uuid.UUID, body: LeaseToken, core: State,
                        _: WorkerAuth) -> JobHeartbeatResponse:
    """Extend the lease; 409 when the lease is lost (stop working on it)."""
    expires = await jobs.heartbeat(core.pg, core.queue, core.clock, job_id=job_id,
                                   token=body.lease_token, ttl_s=core.settings.lease_ttl_s)
    return JobHeartbeatResponse(lease_expires_at=expires)


@router.post("/steps")
async def report_steps(body: StepReports, core: State, _: WorkerAuth) -> StepReportsResponse:
    """Store the steps a worker's slots made since its last call, in one call: each report is
    ``stored``, ``lost`` (stop working on that job) or ``refused`` (``detail`` says why: a
    report that sets ``step.label`` is, as the master labels steps from the judge's verdict),
    in the order sent."""
    answers = await _report(core, [(r.job_id, r.lease_token, r.step) for r in body.reports])
    return StepReportsResponse(reports=[_outcome(r, answer)
                                        for r, answer in zip(body.reports, answers, strict=True)])


@router.post("/{job_id}/steps", status_code=204, responses=error_responses(404, 409))
async def report_step(job_id: uuid.UUID, body: StepReport, core: State, _: WorkerAuth) -> None:
    """Store one step of the episode this job runs (idempotent per index): ``POST
    /v1/jobs/steps`` with a batch of one, its refusal as this call's error (409 when the lease
    is lost or does not allow it; 422 naming ``step.label`` when the report sets it: the
    master labels steps from the judge's verdict, and a worker's label would be taken for
    one)."""
    [answer] = await _report(core, [(job_id, body.lease_token, body.step)])
    if answer is not None:
        raise answer


async def _report(core: AppState,
                  reports: list[tuple[uuid.UUID, str, Step]]) -> list[jobs.StepRefusal | None]:
    """Both step routes' one path: :func:`master.jobs.report_steps`, the stored ones counted."""
    answers = await jobs.report_steps(core.pg, reports)
    if core.metrics:
        core.metrics.steps.inc(sum(a is None for a in answers))
    return answers


def _outcome(report: JobStepReport, answer: jobs.StepRefusal | None) -> StepReportOutcome:
    """One report's answer in a batch's response."""
    job_id, index = report.job_id, report.step.index
    if answer is None:
        return StepReportOutcome(job_id=job_id, index=index, outcome="stored")
    if isinstance(answer, StepRefused):
        return StepReportOutcome(job_id=job_id, index=index, outcome="refused",
                                 detail=str(answer))
    return StepReportOutcome(job_id=job_id, index=index, outcome="lost",
                             status=answer.status if isinstance(answer, LeaseLost) else None)


@router.post("/{job_id}/complete", status_code=204,
             responses=error_responses(404, 409))
@keeps_work
async def complete_job(job_id: uuid.UUID, body: JobComplete, core: State, _: WorkerAuth) -> None:
    """Finish the job with the result of its kind; 409 (and no change) when the token is
    stale, 422 (and no change) when the result does not fit or the kind is not the job's."""
    kind = await jobs.complete(core.pg, core.queue, job_id=job_id, token=body.lease_token,
                               kind=body.kind, result=body.result,
                               staleness_versions=core.settings.group_staleness_versions)
    if core.metrics:
        core.metrics.jobs_finished.labels(kind.value, "succeeded").inc()


@router.post("/{job_id}/fail", responses=error_responses(404, 409))
@keeps_work
async def fail_job(job_id: uuid.UUID, body: JobFail, core: State, _: WorkerAuth) -> JobState:
    """Give up this attempt: requeued while attempts remain (and ``retry``), else failed."""
    await jobs.fail(core.pg, core.queue, job_id=job_id, token=body.lease_token,
                    error=body.error, retry=body.retry)
    state = await get_job(job_id, core, _)
    if core.metrics:
        core.metrics.jobs_finished.labels(state.kind.value, "failed").inc()
    return state


@router.post("/{job_id}/release", responses=error_responses(404, 409))
async def release_job(job_id: uuid.UUID, body: JobRelease, core: State,
                      _: WorkerAuth) -> JobState:
    """Give the job back without counting the attempt: for a fault of the worker's
    infrastructure, not of the job (its desktop provider unreachable, its credentials refused,
    its template or image missing). The job is queued again for any worker; the steps this
    attempt reported are dropped; 409 when the lease is lost."""
    await jobs.release(core.pg, core.queue, job_id=job_id, token=body.lease_token,
                       reason=body.reason)
    return await get_job(job_id, core, _)


@router.get("/{job_id}", responses=error_responses(404))
async def get_job(job_id: uuid.UUID, core: State, _: Reader) -> JobState:
    """Queue state of one job."""
    return await job_rows.state(core.pg, job_id)
