"""Request and response bodies of the master's REST API (``/v1``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from coda.bounds import MAX_ERROR_TEXT, MAX_GROUP_SIZE, MAX_SLOTS
from coda.contracts.coverage import CoverageReport
from coda.contracts.desktop import ProviderState
from coda.contracts.jobs import (
    EpisodeResult,
    GroupJobPayload,
    GroupJobResult,
    Job,
    JudgeJobPayload,
    JudgeJobResult,
)
from coda.contracts.records import (
    APP_MAX,
    DEFAULT_GROUP_SIZE,
    NAME_MAX,
    TOKEN_MAX,
    Batch,
    Episode,
    JobKind,
    JobStatus,
    JudgeMode,
    Step,
    Worker,
)
from coda.contracts.training import (
    Group,
    GroupRecord,
    GroupStatus,
    LabelRule,
    ModelVersion,
    TrainingMetrics,
    VersionTraining,
)
from coda.tasks import TaskDocument

MAX_ROLLOUTS = 64
MAX_BATCH_TASKS = 100_000
MAX_PRIORITY = 1000
MAX_ATTEMPTS = 20
Name = Annotated[str, Field(min_length=1, max_length=NAME_MAX)]
AppName = Annotated[str, Field(min_length=1, max_length=APP_MAX)]


class BatchCreate(BaseModel):
    """Submit tasks: each task runs ``rollouts`` times (Average@k / Pass@k)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=NAME_MAX)
    tasks: list[TaskDocument] = Field(
        min_length=1, max_length=MAX_BATCH_TASKS,
        description="task documents: CODA TaskSpec JSON (keeps ids and sources), or raw "
        "ScienceBoard / OSWorld task JSON; each is parsed on its own, and an error names the "
        "task's index and field")
    rollouts: int = Field(default=1, ge=1, le=MAX_ROLLOUTS)
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY,
                          description="higher runs first")
    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS)
    planner_version: str | None = Field(default=None, min_length=1, max_length=NAME_MAX,
                                       description="pin a planner version")
    judge: JudgeMode = Field(default=JudgeMode.ALWAYS,
                             description="which completed episodes get a judge job")
    label_rule: LabelRule = Field(default=LabelRule.CLEAN_ONLY,
                                  description="how a verdict becomes positive steps")
    group_size: int = Field(default=DEFAULT_GROUP_SIZE, ge=0, le=MAX_GROUP_SIZE,
                            description="G plans sampled per positive step (0: no group jobs)")


class BatchCreated(BaseModel):
    batch: Batch
    episode_ids: list[uuid.UUID]


class EpisodeList(BaseModel):
    items: list[Episode]
    total: int


class BatchList(BaseModel):
    items: list[Batch]
    total: int


class _JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    max_attempts: int = Field(default=3, ge=1, le=MAX_ATTEMPTS)


class JudgeJobCreate(_JobCreate):
    """Enqueue a judge job for an episode."""

    kind: Literal[JobKind.JUDGE]
    payload: JudgeJobPayload


class GroupJobCreate(_JobCreate):
    """Enqueue a group job at one step of an episode."""

    kind: Literal[JobKind.GROUP]
    payload: GroupJobPayload


JobCreate = Annotated[JudgeJobCreate | GroupJobCreate, Field(discriminator="kind")]
"""Enqueue a judge or group job directly (episode jobs come from batches): the kind says the
payload's type."""


class JobCreated(BaseModel):
    id: uuid.UUID
    kind: JobKind


class WorkerRegister(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=NAME_MAX)
    host: str | None = Field(default=None, max_length=NAME_MAX)
    slots: int = Field(default=1, ge=1, le=MAX_SLOTS)
    kinds: list[JobKind] = Field(default_factory=lambda: [JobKind.EPISODE], min_length=1,
                                 max_length=len(JobKind))
    apps: list[AppName] = Field(default_factory=list, max_length=1000)


class WorkerHeartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    busy_slots: int = Field(default=0, ge=0, le=MAX_SLOTS,
                            description="slots running a job (capped at the worker's slots)")
    provider: ProviderState | None = Field(
        default=None, description="its desktop provider: ok, or the infrastructure fault it "
        "waits out (None: it has no desktop slots)")


class LeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    worker_id: uuid.UUID
    kind: JobKind = JobKind.EPISODE
    capacity: int = Field(default=1, ge=1, le=256, description="jobs wanted at most")
    wait_s: float = Field(default=0.0, ge=0, le=60, description="long-poll time when empty")


class LeaseResponse(BaseModel):
    jobs: list[Job]


class LeaseToken(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lease_token: str = Field(min_length=8, max_length=TOKEN_MAX)


class JobHeartbeatResponse(BaseModel):
    lease_expires_at: datetime


HEARTBEAT_BATCH_MAX = 512
"""Leases one batched heartbeat call may carry (a worker with more sends several calls)."""


class LeaseRef(LeaseToken):
    """One lease a worker holds: the job and the token it was leased with."""

    job_id: uuid.UUID


class LeaseHeartbeats(BaseModel):
    """``POST /v1/jobs/heartbeat``: every lease a worker holds, in one call."""

    model_config = ConfigDict(extra="forbid")

    leases: list[LeaseRef] = Field(min_length=1, max_length=HEARTBEAT_BATCH_MAX)


class LeaseBeat(BaseModel):
    """The answer for one lease: ``extended`` (until ``lease_expires_at``) or ``lost`` (stop
    working on it; ``status`` is the job's, None when there is no such job)."""

    job_id: uuid.UUID
    outcome: Literal["extended", "lost"]
    lease_expires_at: datetime | None = None
    status: JobStatus | None = None


class LeaseHeartbeatsResponse(BaseModel):
    """One :class:`LeaseBeat` per lease sent, in the order sent."""

    leases: list[LeaseBeat]


class StepReport(LeaseToken):
    step: Step


STEP_BATCH_MAX = 256
"""Step reports one batched call may carry (``POST /v1/jobs/steps``)."""


class JobStepReport(StepReport):
    """One step of the episode job ``job_id`` runs, with the token it was leased with."""

    job_id: uuid.UUID


class StepReports(BaseModel):
    """``POST /v1/jobs/steps``: the step reports a worker's slots made since its last call,
    in one call (a VM server whose slots step every 10 s sends one call every few seconds,
    not one per step)."""

    model_config = ConfigDict(extra="forbid")

    reports: list[JobStepReport] = Field(min_length=1, max_length=STEP_BATCH_MAX)


class StepReportOutcome(BaseModel):
    """The answer for one report: ``stored``; ``lost`` (the lease is not held with that
    token: stop working on the job; ``status`` is the job's, None when there is no such job);
    or ``refused`` (the report does not fit the lease: ``detail`` says why, as the single
    report's 409 or 422 would)."""

    job_id: uuid.UUID
    index: int
    outcome: Literal["stored", "lost", "refused"]
    status: JobStatus | None = None
    detail: str | None = None


class StepReportsResponse(BaseModel):
    """One :class:`StepReportOutcome` per report sent, in the order sent."""

    reports: list[StepReportOutcome]


class EpisodeJobComplete(LeaseToken):
    kind: Literal[JobKind.EPISODE]
    result: EpisodeResult


class JudgeJobComplete(LeaseToken):
    kind: Literal[JobKind.JUDGE]
    result: JudgeJobResult


class GroupJobComplete(LeaseToken):
    kind: Literal[JobKind.GROUP]
    result: GroupJobResult


JobComplete = Annotated[EpisodeJobComplete | JudgeJobComplete | GroupJobComplete,
                        Field(discriminator="kind")]
"""Finish a leased job with the result of its kind (a kind other than the job's is refused,
422 naming ``kind``)."""


class JobFail(LeaseToken):
    error: str = Field(min_length=1, max_length=MAX_ERROR_TEXT)
    retry: bool = Field(default=True, description="requeue if attempts remain")


class JobRelease(LeaseToken):
    reason: str = Field(min_length=1, max_length=2000,
                        description="why the worker gives the job back (its provider's fault)")


class JobState(BaseModel):
    id: uuid.UUID
    kind: JobKind
    status: str
    attempts: int
    max_attempts: int
    error: str | None = None


class ArtifactRef(BaseModel):
    key: str
    size: int
    content_type: str


class GroupCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    group: Group


class GroupCreated(BaseModel):
    id: uuid.UUID


class GroupLeaseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_groups: int = Field(default=8, ge=1, le=1024)
    ttl_s: float = Field(default=600, ge=1, le=86_400)
    planner_versions: list[Name] | None = Field(
        default=None, max_length=1000,
        description="only groups sampled by these versions (staleness window)")


class GroupList(BaseModel):
    items: list[GroupRecord]


class GroupAck(LeaseToken):
    status: Literal[GroupStatus.CONSUMED, GroupStatus.DROPPED] = Field(
        default=GroupStatus.CONSUMED, description="consumed (trained on) or dropped (stale)")


class ModelVersionList(BaseModel):
    items: list[ModelVersion]


class AppScore(BaseModel):
    """One row of the paper's Table 1 format."""

    app: str
    tasks: int
    rollouts: int
    average_at_k: float | None
    pass_at_k: float | None


class VersionRate(BaseModel):
    """The success of the finished rollouts one planner version ran (the tasks' checkers; a
    failed or undecided rollout counts as not solved, as in Table 1), with its 95 % Wilson
    interval."""

    planner_version: str = Field(description="'base' for the model without adapter")
    rollouts: int = Field(ge=0)
    succeeded: int = Field(ge=0)
    rate: float | None = Field(default=None, ge=0, le=1, description="None: no rollout")
    ci_low: float = Field(ge=0, le=1)
    ci_high: float = Field(ge=0, le=1)


class VersionRateList(BaseModel):
    items: list[VersionRate]


class QueueDepth(BaseModel):
    kind: JobKind
    queued: int
    leased: int


class LiveSlot(BaseModel):
    """A running episode and the screen its latest step saw."""

    episode_id: uuid.UUID
    app: str
    task_id: str
    attempt: int
    worker: str | None = None
    step: int | None = Field(default=None, description="index of its latest step")
    screenshot: str | None = Field(default=None, description="artifact key of that screen")
    thought: str | None = None


class JudgeRate(BaseModel):
    """Judge pass rate of one app: judged episodes and those the judge called correct."""

    app: str
    judged: int
    correct: int
    pass_rate: float | None


class StepReward(BaseModel):
    """The GRPO group sampled at one step: its candidates' rewards."""

    step_index: int
    status: str
    reason: str | None = None
    candidates: int
    reward_mean: float
    reward_max: float


class EpisodeReplay(BaseModel):
    """An episode with its steps, verdict and the rewards of the groups sampled at its
    steps: what the dashboard's replay shows."""

    episode: Episode
    rewards: list[StepReward] = Field(default_factory=list)


class SupervisedChild(BaseModel):
    """A process ``coda up`` started and restarts when it dies (``coda_app.supervise``)."""

    name: str = Field(max_length=NAME_MAX)
    running: bool
    restarts: int = Field(ge=0, description="restarts since `coda up` started")


class StatusReport(BaseModel):
    generated_at: datetime
    batches: list[Batch]
    scores: list[AppScore]
    workers: list[Worker]
    queues: list[QueueDepth]
    recent_episodes: list[Episode]
    training: list[VersionTraining] = Field(default_factory=list,
                                            description="trainer figures per planner version")
    training_curve: list[TrainingMetrics] = Field(default_factory=list,
                                                  description="the latest updates, oldest first")
    groups: dict[str, int] = Field(default_factory=dict,
                                   description="GRPO groups by status (ready, leased, ...)")
    groups_dropped: dict[str, int] = Field(
        default_factory=dict, description="dropped groups by reason: stale (a planner version "
        "outside the window), equal_rewards (no advantage), or acked (the trainer)")
    verdicts: dict[str, int] = Field(
        default_factory=dict, description="judged and correct episodes (all batches)")
    live: list[LiveSlot] = Field(default_factory=list, description="running episodes")
    planner_version: str | None = Field(default=None,
                                        description="the current planner version (None: base)")
    judge_rates: list[JudgeRate] = Field(default_factory=list, description="per app")
    coverage: CoverageReport | None = Field(
        default=None, description="which task files can run with a real verdict on the "
        "workers' image (`coda tasks coverage`, read from CODA_COVERAGE_FILE)")
    supervised: list[SupervisedChild] = Field(
        default_factory=list, description="under `coda up`: the processes it started beside "
        "the master, whether each runs and how often it was restarted")
    version_rates: list[VersionRate] = Field(
        default_factory=list, description="success rate per planner version of the batch shown "
        "(the one asked for, else the newest)")
    version_rates_all: list[VersionRate] = Field(
        default_factory=list, description="success rate per planner version over all batches")


TOKEN_FINGERPRINT_PATTERN = r"^[0-9a-f]{16}$"
"""A worker token's fingerprint: the first 16 hex digits of its SHA-256 (the master and
``coda admin`` name a token by it; the token itself is never shown or stored)."""


class WorkerTokenInfo(BaseModel):
    """A worker token the master knows (from its settings), by fingerprint."""

    fingerprint: str = Field(pattern=TOKEN_FINGERPRINT_PATTERN)
    revoked_at: datetime | None = None
    workers: list[uuid.UUID] = Field(default_factory=list,
                                     description="workers registered with this token")


class WorkerTokenRevoked(WorkerTokenInfo):
    """What a revocation did: the token's workers and the leases given back to the queue."""

    leases_returned: int = Field(default=0, ge=0)
