"""Judge verdicts, decoupled-GRPO groups and model versions."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coda.actions import Action
from coda.bounds import (
    INT32_MAX,
    MAX_GROUP_SIZE,
    MAX_LIST,
    MAX_STEP_INDEX,
    MAX_TOKENS,
    Count,
    Finite,
    Fraction,
    Index,
    LogProb,
    Pixels,
    StepNumber,
    TokenId,
)
from coda.contracts.history import MAX_HISTORY, HistoryStep


class LabelRule(StrEnum):
    """How a verdict becomes positive steps."""

    CLEAN_ONLY = "clean_only"  # CODA: only clean successes, every step positive
    BEFORE_FIRST_ERROR = "before_first_error"  # SEAgent: steps before the first error


StepNumbers = list[StepNumber]
MAX_VOTES = 512
"""Votes of one verdict: voting@16 of 16 models, at two resolutions, with room to spare."""


class Vote(BaseModel):
    """One judge sample."""

    model_config = ConfigDict(extra="forbid")

    model: str
    resolution: str = Field(default="high", description="low or high")
    raw: str
    parsed: bool
    correctness: bool | None = None
    redundant: StepNumbers = Field(default_factory=list, max_length=MAX_STEP_INDEX + 1)
    first_error_step: StepNumber | None = None
    error_type: str | None = None
    correct_action: str | None = None


class JudgeInput(BaseModel):
    """What one judge model was shown: the trajectory lowered, if needed, to fit its context
    (first the screenshots' resolution, then the number of frames)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    steps: StepNumbers = Field(max_length=MAX_STEP_INDEX + 1,
                               description="the steps shown, numbered from 1")
    max_pixels: Count | None = Field(
        default=None, description="bound on each high-resolution screenshot's pixels (None: as "
                                  "captured or the service's configured bound)")
    reduced: bool = Field(default=False, description="lowered to fit the model's context")
    refusals: Count = Field(default=0,
                            description="settings the model refused as longer than its context")


class Verdict(BaseModel):
    """The judge's decision on a trajectory (steps numbered from 1)."""

    model_config = ConfigDict(extra="forbid")

    correct: bool
    redundant: StepNumbers = Field(default_factory=list, max_length=MAX_STEP_INDEX + 1)
    first_error_step: StepNumber | None = None
    error_type: str | None = None
    correct_action: str | None = None
    votes: list[Vote] = Field(default_factory=list, max_length=MAX_VOTES)
    positive_steps: list[Index] = Field(
        default_factory=list, max_length=MAX_STEP_INDEX + 1,
        description="0-based step indices labelled positive")
    inputs: list[JudgeInput] = Field(
        default_factory=list, max_length=MAX_LIST,
        description="what each judge model was shown (one per model)")


class Candidate(BaseModel):
    """One of the G plans of a group, with the executor's action and its reward."""

    model_config = ConfigDict(extra="forbid")

    plan: str
    action: Action | None = None
    raw_action: str | None = None
    reward: Fraction
    planner_version: str | None = Field(default=None, max_length=200)
    token_count: Count | None = None
    token_ids: list[TokenId] | None = Field(
        default=None, max_length=MAX_TOKENS,
        description="the plan's generated token ids (EOS included when the model stopped on "
                    "it); the trainer re-tokenizes the text without")
    logprobs: list[LogProb] | None = Field(
        default=None, max_length=MAX_TOKENS,
        description="the sampler's log-probability of each token of token_ids (the trainer's "
                    "truncated importance correction uses them)")

    @model_validator(mode="after")
    def _logprobs_match_tokens(self) -> Candidate:
        if self.logprobs is None:
            return self
        if self.token_ids is None or len(self.logprobs) != len(self.token_ids):
            raise ValueError("logprobs: needs token_ids of the same length")
        return self


class StateRef(BaseModel):
    """A stored state of an episode: what the planner saw before step ``step_index``."""

    model_config = ConfigDict(extra="forbid")

    episode_id: uuid.UUID | None = None
    step_index: Index
    instruction: str
    app: str
    screenshot: str = Field(description="artifact key of the current screen")
    previous_screenshot: str | None = None
    history: list[HistoryStep] = Field(
        default_factory=list, max_length=MAX_HISTORY,
        description="the past steps the planner was shown, as the planner request carries them")
    screen_width: Pixels = Field(description="width of the screen the screenshot shows")
    screen_height: Pixels = Field(description="height of the screen the screenshot shows")


class GroupStatus(StrEnum):
    READY = "ready"
    LEASED = "leased"
    CONSUMED = "consumed"
    DROPPED = "dropped"


class Group(BaseModel):
    """G candidates sampled at one labelled state: one GRPO group."""

    model_config = ConfigDict(extra="forbid")

    state: StateRef
    target: Action = Field(description="the labelled (positive) action at this state")
    candidates: list[Candidate] = Field(min_length=1, max_length=MAX_GROUP_SIZE)
    planner_version: str | None = Field(default=None, max_length=200)  # master: varchar(200)


class GroupRecord(BaseModel):
    id: uuid.UUID
    status: GroupStatus
    group: Group
    created_at: datetime
    lease_token: str | None = None
    lease_expires_at: datetime | None = None


METRIC_NAME = r"^[A-Za-z0-9_./:-]{1,100}$"
MAX_METRICS = 64
MetricName = Annotated[str, Field(pattern=METRIC_NAME)]


class ModelRole(StrEnum):
    PLANNER = "planner"
    EXECUTOR = "executor"
    JUDGE = "judge"


class ModelVersionCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:/-]+$")
    role: ModelRole = ModelRole.PLANNER
    base_model: str = Field(min_length=1)
    adapter_uri: str | None = Field(default=None, description="fsspec URL of a LoRA adapter")
    parent: str | None = Field(default=None, max_length=200)  # master: varchar(200)
    make_current: bool = True
    metrics: dict[MetricName, Finite] = Field(default_factory=dict, max_length=MAX_METRICS)


class ModelVersion(BaseModel):
    name: str
    role: ModelRole
    base_model: str
    adapter_uri: str | None = None
    parent: str | None = None
    is_current: bool
    metrics: dict[str, float] = Field(default_factory=dict)
    created_at: datetime




class TrainingMetricsReport(BaseModel):
    """The figures of one trainer update, reported to the master."""

    model_config = ConfigDict(extra="forbid")

    run: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$")
    update: int = Field(ge=0, le=INT32_MAX)
    planner_version: str = Field(min_length=1, max_length=200,
                                 description="the policy version the update started from")
    metrics: dict[MetricName, Finite] = Field(
        default_factory=dict, max_length=MAX_METRICS,
        description="reward_mean, loss, kl, clip_fraction, ...")


class TrainingMetrics(TrainingMetricsReport):
    created_at: datetime


class TrainingMetricsList(BaseModel):
    items: list[TrainingMetrics]


class VersionTraining(BaseModel):
    """The updates trained from one planner version: count and mean figures."""

    planner_version: str
    run: str
    updates: int
    first_update: int
    last_update: int
    means: dict[str, float] = Field(default_factory=dict)
    last: dict[str, float] = Field(default_factory=dict)
