"""Judge verdicts, decoupled-GRPO groups and model versions."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coda.actions import Action


class LabelRule(StrEnum):
    """How a verdict becomes positive steps."""

    CLEAN_ONLY = "clean_only"  # CODA: only clean successes, every step positive
    BEFORE_FIRST_ERROR = "before_first_error"  # SEAgent: steps before the first error


class Vote(BaseModel):
    """One judge sample."""

    model: str
    resolution: str = Field(default="high", description="low or high")
    raw: str
    parsed: bool
    correctness: bool | None = None
    redundant: list[int] = Field(default_factory=list)
    first_error_step: int | None = None
    error_type: str | None = None
    correct_action: str | None = None


class Verdict(BaseModel):
    """The judge's decision on a trajectory (steps numbered from 1)."""

    model_config = ConfigDict(extra="forbid")

    correct: bool
    redundant: list[int] = Field(default_factory=list)
    first_error_step: int | None = Field(default=None, ge=1)
    error_type: str | None = None
    correct_action: str | None = None
    votes: list[Vote] = Field(default_factory=list)
    positive_steps: list[int] = Field(
        default_factory=list, description="0-based step indices labelled positive"
    )


class Candidate(BaseModel):
    """One of the G plans of a group, with the executor's action and its reward."""

    plan: str
    action: Action | None = None
    raw_action: str | None = None
    reward: float = Field(ge=0, le=1)
    planner_version: str | None = None
    token_count: int | None = None


class StateRef(BaseModel):
    """A stored state of an episode: what the planner saw before step ``step_index``."""

    episode_id: uuid.UUID | None = None
    step_index: int = Field(ge=0)
    instruction: str
    app: str
    screenshot: str = Field(description="artifact key of the current screen")
    previous_screenshot: str | None = None
    history: list[dict[str, Any]] = Field(
        default_factory=list, description="past steps: {thought, action_text, screenshot}"
    )
    screen_width: int = Field(default=1280, ge=1)
    screen_height: int = Field(default=800, ge=1)


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
    candidates: list[Candidate] = Field(min_length=1)
    planner_version: str | None = Field(default=None, max_length=200)  # master: varchar(200)


class GroupRecord(BaseModel):
    id: uuid.UUID
    status: GroupStatus
    group: Group
    created_at: datetime
    lease_token: str | None = None
    lease_expires_at: datetime | None = None


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
    metrics: dict[str, float] = Field(default_factory=dict)


class ModelVersion(BaseModel):
    name: str
    role: ModelRole
    base_model: str
    adapter_uri: str | None = None
    parent: str | None = None
    is_current: bool
    metrics: dict[str, float] = Field(default_factory=dict)
    created_at: datetime
