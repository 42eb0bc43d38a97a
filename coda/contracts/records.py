"""Records the master stores and serves: batches, episodes, steps, jobs, workers."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coda.actions import Action
from coda.contracts.training import LabelRule, Verdict
from coda.tasks import TaskSpec

# Bounds of the columns the master stores these fields in (Postgres integer, varchar(n)), so a
# value that cannot be stored is refused with a 422 naming the field, never a 500.
INT32_MAX = 2**31 - 1
NAME_MAX = 200  # names, ids, versions: varchar(200)
APP_MAX = 100  # application names: varchar(100)
TOKEN_MAX = 64  # lease tokens: varchar(64)
MAX_STEP_INDEX = 100_000
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


class EpisodeStatus(StrEnum):
    """Life of one rollout. ``completed`` means it ran to the end; ``success`` says how it did."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class BatchStatus(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


class StepOutcome(StrEnum):
    OK = "ok"
    PARSE_ERROR = "parse_error"
    EXECUTION_ERROR = "execution_error"
    MODEL_ERROR = "model_error"


MAX_SCREEN_SIDE = 16_384


class ScreenSize(BaseModel):
    """Pixel size of the screen a screenshot shows (the action space's coordinates)."""

    model_config = ConfigDict(extra="forbid")

    width: int = Field(ge=1, le=MAX_SCREEN_SIDE)
    height: int = Field(ge=1, le=MAX_SCREEN_SIDE)


class PlanRecord(BaseModel):
    """What the planner wrote for a step, parsed, and the prompt variant it was asked with.
    A group job rebuilds the planner input from it: every field is required."""

    model_config = ConfigDict(extra="forbid")

    thought: str | None = Field(description="the Thought part of the plan, if it had one")
    action_hint: str | None = Field(description="the Action part (e.g. FAIL), if it had one")
    finished: bool = Field(description="the plan said DONE (or gave an answer)")
    answer: str | None = Field(description="the answer of an ANS plan, if any")
    answer_mode: bool = Field(description="the planner was asked with its ANS prompt")
    completion_tokens: int | None = Field(ge=0, le=INT32_MAX,
                                          description="tokens the planner generated")


class StepTimings(BaseModel):
    """Where one step's time went, in milliseconds (``overhead``: the worker's own share,
    everything but model inference, the action's effect and the settle wait)."""

    model_config = ConfigDict(extra="forbid")

    observe: float = Field(ge=0)
    upload: float = Field(ge=0)
    plan: float = Field(ge=0)
    plan_model: float = Field(ge=0)
    execute: float = Field(ge=0)
    execute_model: float = Field(ge=0)
    act: float = Field(ge=0)
    settle: float = Field(ge=0)
    report: float = Field(ge=0)
    total: float = Field(ge=0)
    overhead: float = Field(ge=0)


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

    index: int = Field(ge=0, le=MAX_STEP_INDEX)
    attempt: int | None = Field(
        default=None, ge=1, le=INT32_MAX,
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
    latency_ms: float | None = Field(default=None, ge=0)
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


class EpisodeResult(BaseModel):
    """What a worker reports when an episode job ends normally."""

    model_config = ConfigDict(extra="forbid")

    success: bool | None = Field(default=None, description="task checker verdict, if any")
    score: float | None = Field(default=None, ge=0, le=1)
    answer: str | None = None
    final_screenshot: str | None = None
    steps: int | None = Field(default=None, ge=0, le=MAX_STEP_INDEX)
    info: dict[str, Any] = Field(default_factory=dict)


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
MAX_GROUP_SIZE = 64


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


class Job(BaseModel):
    """A leased unit of work as a worker receives it."""

    id: uuid.UUID
    kind: JobKind
    lease_token: str
    lease_expires_at: datetime
    attempt: int = Field(ge=1)
    max_attempts: int = Field(ge=1)
    payload: dict[str, Any]


class EpisodePayload(BaseModel):
    """Payload of an ``episode`` job."""

    episode_id: uuid.UUID
    batch_id: uuid.UUID
    rollout: int
    task: TaskSpec
    planner_version: str | None = None


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
