"""Records the master stores and serves: batches, episodes, steps, workers, judged
trajectories (a job's payload and result: :mod:`coda.contracts.jobs`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coda.actions import Action
from coda.bounds import (
    MAX_GROUP_SIZE,
    Attempt,
    Count,
    Index,
    Millis,
    Pixels,
)
from coda.contracts.desktop import ProviderState
from coda.contracts.training import LabelRule, Verdict

# Bounds of the columns the master stores these fields in (varchar(n)), so a value that cannot
# be stored is refused with a 422 naming the field, never a 500 (numbers: coda.bounds).
NAME_MAX = 200  # names, ids, versions: varchar(200)
APP_MAX = 100  # application names: varchar(100)
TOKEN_MAX = 64  # lease tokens: varchar(64)
MAX_OFFSET = 1_000_000_000  # list routes: how many rows may be skipped


class JobKind(StrEnum):
    EPISODE = "episode"
    JUDGE = "judge"
    GROUP = "group"


class JobStatus(StrEnum):
    """Queue state of one job (Postgres is the source of truth)."""

    QUEUED = "queued"
    LEASED = "leased"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_JOB_STATUSES = frozenset({JobStatus.QUEUED, JobStatus.LEASED})
"""Jobs still in the queue (the Redis queue is rebuilt from them); every other status is
terminal."""


class EpisodeStatus(StrEnum):
    """Life of one rollout. ``completed`` means it ran to the end; ``success`` says how it did."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED_EPISODE_STATUSES = frozenset({EpisodeStatus.COMPLETED, EpisodeStatus.FAILED})
"""Rollouts that ran to their end, the ones the scores count (cancelled is terminal too, but
does not count)."""


class BatchStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class StepOutcome(StrEnum):
    OK = "ok"
    PARSE_ERROR = "parse_error"
    EXECUTION_ERROR = "execution_error"
    MODEL_ERROR = "model_error"


class ScreenSize(BaseModel):
    """Pixel size of the screen a screenshot shows (the action space's coordinates)."""

    model_config = ConfigDict(extra="forbid")

    width: Pixels
    height: Pixels


class PlanRecord(BaseModel):
    """What the planner wrote for a step, parsed, and the prompt variant it was asked with.
    A group job rebuilds the planner input from it: every field is required."""

    model_config = ConfigDict(extra="forbid")

    thought: str | None = Field(description="the Thought part of the plan, if it had one")
    action_hint: str | None = Field(description="the Action part (e.g. FAIL), if it had one")
    finished: bool = Field(description="the plan said DONE (or gave an answer)")
    answer: str | None = Field(description="the answer of an ANS plan, if any")
    answer_mode: bool = Field(description="the planner was asked with its ANS prompt")
    completion_tokens: Count | None = Field(description="tokens the planner generated")


class StepTimings(BaseModel):
    """Where one step's time went, in milliseconds (``overhead``: the worker's own share,
    everything but model inference, the action's effect and the settle wait)."""

    model_config = ConfigDict(extra="forbid")

    observe: Millis
    upload: Millis
    plan: Millis
    plan_model: Millis
    execute: Millis
    execute_model: Millis
    act: Millis
    settle: Millis
    report: Millis
    total: Millis
    overhead: Millis


class StepLabel(StrEnum):
    """The judge's label of a step (set by the master from the episode's verdict)."""

    POSITIVE = "positive"
    NEGATIVE = "negative"


class Step(BaseModel):
    """One planner -> executor -> environment step of an episode.

    Every field is typed; nothing travels in a free dict. A value that was not measured is
    ``None``, never a default that looks measured: a step with a screenshot names the size of
    the screen it shows (``screen``), and a step the planner answered carries the parsed plan
    (``plan``)."""

    model_config = ConfigDict(extra="forbid")

    index: Index
    attempt: Attempt | None = Field(
        default=None,
        description="which lease of the episode ran it: the master sets it from the lease; a "
        "report naming another attempt than the lease's is refused (409)")
    thought: str | None = None
    action: Action | None = None
    raw_executor_text: str | None = None
    screenshot: str | None = Field(default=None, description="artifact key of the screen before")
    screen: ScreenSize | None = Field(
        default=None, description="size of the screen the screenshot shows (required with a "
        "screenshot)")
    plan: PlanRecord | None = Field(default=None, description="the planner's parsed answer")
    outcome: StepOutcome = StepOutcome.OK
    error: str | None = None
    planner_version: str | None = Field(default=None, max_length=NAME_MAX)
    latency_ms: Millis | None = None
    timings: StepTimings | None = Field(default=None, description="where the step's time went")
    label: StepLabel | None = Field(
        default=None, description="the judge's label, set by the master from the verdict "
        "(a worker's report cannot set it)")
    created_at: datetime | None = None

    @model_validator(mode="after")
    def _screen_with_screenshot(self) -> Step:
        if self.screenshot is not None and self.screen is None:
            raise ValueError("screen: required with a screenshot (the size of the screen it "
                             "shows)")
        return self


class Episode(BaseModel):
    id: uuid.UUID
    batch_id: uuid.UUID
    job_id: uuid.UUID
    task_id: str
    app: str
    rollout: int = Field(ge=0, description="index among the k rollouts of the task")
    status: EpisodeStatus
    success: bool | None = None
    score: float | None = None
    answer: str | None = None
    error: str | None = None
    attempts: int = 0
    planner_version: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    steps: list[Step] | None = None
    instruction: str | None = Field(default=None, description="the task's instruction (single "
                                                              "episode reads)")
    verdict: Verdict | None = Field(default=None, description="the judge's verdict, once judged")


class BatchProgress(BaseModel):
    total: int = 0
    queued: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    succeeded: int = Field(default=0, description="completed episodes whose task succeeded")


class JudgeMode(StrEnum):
    """When a finished episode gets a judge job (a batch option)."""

    ALWAYS = "always"  # every completed episode (CODA: the judge labels every trajectory)
    NO_CHECKER = "no_checker"  # only episodes whose checkers did not decide (success is None)
    NEVER = "never"


DEFAULT_GROUP_SIZE = 8


class BatchOptions(BaseModel):
    """What happens to a batch's finished episodes: judging, labelling, GRPO groups."""

    judge: JudgeMode = JudgeMode.ALWAYS
    label_rule: LabelRule = LabelRule.CLEAN_ONLY
    group_size: int = Field(default=DEFAULT_GROUP_SIZE, ge=0, le=MAX_GROUP_SIZE)


class Batch(BaseModel):
    id: uuid.UUID
    name: str | None = None
    status: BatchStatus
    priority: int
    rollouts: int
    planner_version: str | None = None
    created_at: datetime
    progress: BatchProgress
    options: BatchOptions = Field(default_factory=BatchOptions)


class Worker(BaseModel):
    id: uuid.UUID
    name: str
    host: str | None = None
    slots: int
    kinds: list[JobKind]
    apps: list[str] = Field(default_factory=list)
    registered_at: datetime
    last_heartbeat: datetime | None = None
    busy_slots: int = Field(default=0, ge=0, description="slots running a job, last reported")
    provider: ProviderState | None = Field(
        default=None, description="its desktop provider as last reported: ok, or the "
        "infrastructure fault it waits out (it leases no episode meanwhile)")
    online: bool | None = Field(
        default=None, description="status reads: its last heartbeat is at most the master's "
        "lease TTL old (False: it stopped, drained or died; a worker that comes back registers "
        "a new row under the same name)")


class JudgedTrajectory(BaseModel):
    """A finished episode with its judge verdict and steps (stage-2 SFT data)."""

    episode_id: uuid.UUID
    batch_id: uuid.UUID
    task_id: str
    app: str
    instruction: str
    planner_version: str | None = None
    success: bool | None = None
    verdict: Verdict
    steps: list[Step] = Field(default_factory=list,
                              description="the steps of the attempt that finished, in order")


class JudgedTrajectoryList(BaseModel):
    items: list[JudgedTrajectory]
    total: int
