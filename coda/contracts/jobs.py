"""What each kind of job carries and answers, as one discriminated union on its kind.

A job the master hands out (:data:`Job`) is an :class:`EpisodeJob`, a :class:`JudgeJob` or a
:class:`GroupJob`, each with its own typed payload; what a worker reports when the job ends is
that kind's result (:class:`EpisodeResult`, :class:`JudgeJobResult`, :class:`GroupJobResult`).
The master's request bodies pair them the same way (``coda.contracts.master_api``:
``JobCreate``, ``JobComplete``), so the OpenAPI document says which payload and which result go
with which kind, and neither side validates a free dict by hand.

Every model a peer writes refuses fields it does not know (``extra="forbid"``), and every
number is bounded (:mod:`coda.bounds`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from coda.bounds import (
    MAX_GROUP_SIZE,
    MAX_LIST,
    MAX_SLOTS,
    MAX_STEP_INDEX,
    Attempt,
    Count,
    Fraction,
    Index,
    Millis,
)
from coda.contracts.desktop import CheckResult, CheckVerdict, EndKind, SetupStepResult
from coda.contracts.records import DEFAULT_GROUP_SIZE, NAME_MAX, JobKind
from coda.contracts.training import Group, LabelRule, Verdict
from coda.tasks import TaskSpec

StepCount = Annotated[int, Field(ge=0, le=MAX_STEP_INDEX + 1)]
"""How many steps (at most one more than the largest step index)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# payloads ---------------------------------------------------------------------------------

class EpisodePayload(_Strict):
    """Payload of an ``episode`` job: run one rollout of a task."""

    episode_id: uuid.UUID
    batch_id: uuid.UUID
    rollout: Count = Field(description="index among the k rollouts of the task")
    task: TaskSpec
    planner_version: str | None = Field(default=None, max_length=NAME_MAX)


class JudgeJobPayload(_Strict):
    """Payload of a ``judge`` job: judge one completed episode (the steps of its last attempt)."""

    episode_id: uuid.UUID
    label_rule: LabelRule = LabelRule.CLEAN_ONLY


class GroupJobPayload(_Strict):
    """Payload of a ``group`` job: sample G plans at one positive step of an episode."""

    episode_id: uuid.UUID
    attempt: Attempt = Field(description="the episode attempt whose steps were judged")
    step_index: Index
    group_size: int = Field(default=DEFAULT_GROUP_SIZE, ge=1, le=MAX_GROUP_SIZE)
    planner_version: str | None = Field(
        default=None, max_length=NAME_MAX,
        description="the planner version current when the job was made (None: base model)")


# results ----------------------------------------------------------------------------------

class EpisodeInfo(_Strict):
    """How an episode went, besides its outcome: the end, the checkers, the setup, the slot."""

    end: EndKind = Field(description="how the agent ended it (or TIMEOUT: the step budget)")
    verdict: CheckVerdict = Field(description="what the task's own checkers decided")
    checks: list[CheckResult] = Field(default_factory=list, max_length=MAX_LIST)
    setup: list[SetupStepResult] = Field(default_factory=list, max_length=MAX_LIST)
    step_errors: StepCount = Field(default=0, description="steps whose outcome was not ok")
    slot: int = Field(ge=0, le=MAX_SLOTS, description="the worker's desktop slot")
    overhead_ms: list[Millis] = Field(
        default_factory=list, max_length=MAX_STEP_INDEX + 1,
        description="the worker's own time of each step (all but inference, acting, settling)")


class EpisodeResult(_Strict):
    """What a worker reports when an episode job ends normally."""

    success: bool | None = Field(default=None, description="task checker verdict, if any")
    score: Fraction | None = None
    answer: str | None = None
    final_screenshot: str | None = None
    steps: StepCount | None = None
    info: EpisodeInfo | None = None


class JudgeJobResult(_Strict):
    """What a worker reports when a judge job ends: the verdict (the master stores it with the
    episode, labels its steps and creates the group jobs)."""

    verdict: Verdict


class GroupJobResult(_Strict):
    """What a worker reports when a group job ends: the group it built (stored as ready, or
    dropped as stale or without advantage)."""

    group: Group


JobResult = EpisodeResult | JudgeJobResult | GroupJobResult
"""The result of any kind of job."""


# leased jobs ------------------------------------------------------------------------------

class _LeasedJob(BaseModel):
    """A leased unit of work as a worker receives it."""

    id: uuid.UUID
    lease_token: str
    lease_expires_at: datetime
    attempt: int = Field(ge=1)
    max_attempts: int = Field(ge=1)


class EpisodeJob(_LeasedJob):
    kind: Literal[JobKind.EPISODE]
    payload: EpisodePayload


class JudgeJob(_LeasedJob):
    kind: Literal[JobKind.JUDGE]
    payload: JudgeJobPayload


class GroupJob(_LeasedJob):
    kind: Literal[JobKind.GROUP]
    payload: GroupJobPayload


Job = Annotated[EpisodeJob | JudgeJob | GroupJob, Field(discriminator="kind")]
"""A leased job: its kind says its payload's type (and the result the master takes)."""
