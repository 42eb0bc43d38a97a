"""What a closed-loop run measured (the JSON ``coda learn`` writes; the figures page and the
benchmark read it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from coda.contracts.master_api import VersionRate


class Measured(VersionRate):
    """One planner version's fresh episodes (a batch pinned to it): its success rate with the
    interval, per task too, and the checks of what recorded which version."""

    round: int = Field(ge=0)
    update: int = Field(ge=0, description="updates the version had had")
    batch_id: str
    by_task: dict[str, list[int]] = Field(description="task -> [succeeded, rollouts]")
    episodes_s: float = Field(description="seconds from submitting to the last follow-up job")
    episode_s_median: float | None = Field(default=None,
                                           description="an episode's own seconds (median)")
    step_ms_median: dict[str, float] = Field(
        default_factory=dict, description="a step's parts (median): plan_model, act, settle, "
        "total, ...")
    paths: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="task -> how often each sequence of plan kinds was taken (the recordings' "
                    "kinds: right, another value, another menu, skipped step, ...)")
    version_mismatches: list[str] = Field(
        default_factory=list,
        description="episodes or steps recorded with another version than the batch pinned")


class Update(BaseModel):
    """One GRPO update: what it trained on and the version it published."""

    update: int
    policy_version: str = Field(description="the version trained (and that sampled the groups)")
    published: str | None
    groups: int
    group_versions: dict[str, int]
    dropped: dict[str, int]
    metrics: dict[str, float]
    """The trainer's figures: reward_mean (the mean group reward), reward_std, loss, ..."""
    seconds: float


REWARDED = 0.9
"""A plan's reward at or above this counts it as rewarded (:attr:`LearnResult.rewarded_plans`)."""

USAGE_COUNTERS = frozenset({"ocr_passes", "cache_hits"})
"""Keys of the executor's ``/readyz`` that count the work it did (the OCR backend's), not what
it is: they grow during a run while the executor stays the same."""


def identity(ready: Any) -> Any:
    """``ready`` (a ``/readyz`` body) without its usage counters (pure)."""
    if isinstance(ready, dict):
        return {k: identity(v) for k, v in ready.items() if k not in USAGE_COUNTERS}
    return ready


class ExecutorCheck(BaseModel):
    """The frozen executor, read at the start and at the end of the run."""

    backend: str
    files: dict[str, str] = Field(description="file -> sha256 at the start")
    files_at_end: dict[str, str]
    ready_at_start: dict[str, Any]
    ready_at_end: dict[str, Any]

    @property
    def unchanged(self) -> bool:
        return self.files == self.files_at_end and (
            identity(self.ready_at_start) == identity(self.ready_at_end))


class LearnResult(BaseModel):
    run: str
    reward_control: str
    target: float
    tasks: list[str]
    settings: dict[str, Any]
    warm_start: dict[str, Any]
    executor: ExecutorCheck
    judge_backend: str = Field(
        default="replay", description="the judge's backend: 'replay' (the curricula's recorded "
        "verdicts), 'rules' (the rule-based judge) or a model backend")
    curve: list[Measured] = Field(default_factory=list)
    updates: list[Update] = Field(default_factory=list)
    reached: Measured | None = Field(default=None,
                                     description="the first version at or above the target")
    transfer: Measured | None = Field(
        default=None, description="the last version on the transfer task (settings.transfer), "
        "a task outside the curricula and the warm start")
    rewarded_plans: list[str] = Field(
        default_factory=list, description="the distinct plan texts that earned a reward of at "
        "least REWARDED in a group of the run (trained on, dropped, or sampled by the last "
        "version and never trained on), sorted")
    seconds: float = 0.0
    phases_s: dict[str, float] = Field(default_factory=dict)

    @property
    def recording_free(self) -> bool:
        """Neither the executor nor the judge answered from the curricula's recordings."""
        return self.executor.backend != "replay" and self.judge_backend != "replay"

    @property
    def executor_unchanged(self) -> bool:
        return self.executor.unchanged

    def novel_rewarded_plans(self, warm_texts: set[str]) -> list[str]:
        """The rewarded plans whose text never occurs in the warm-start data (pure)."""
        return [t for t in self.rewarded_plans if t not in warm_texts]

    def rise(self) -> float:
        """The last measured rate minus the first (0 with fewer than two)."""
        rates = [m.rate for m in self.curve if m.rate is not None]
        return rates[-1] - rates[0] if len(rates) > 1 else 0.0
