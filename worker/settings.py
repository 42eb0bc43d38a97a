"""Settings of ``coda worker`` (environment prefix ``CODA_WORKER_``; flags override them)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from coda.contracts.records import JobKind
from coda.contracts.services_api import JudgePolicy
from worker.providers.base import OSWORLD_PAUSE_S, OSWORLD_SCREENSHOT_BUDGET, ScreenshotBudget
from worker.providers.liveness import ALIVE_INTERVAL_S, ALIVE_TTL_S

ProviderName = Literal["local", "docker", "vmware", "vsphere"]


class WorkerSettings(BaseSettings):
    """One VM-host worker: where the master and the model services are, which desktops it
    drives and how many, and the time limits of every outside call."""

    model_config = SettingsConfigDict(env_prefix="CODA_WORKER_", extra="ignore")

    master_url: str = Field(default="http://127.0.0.1:8000", pattern=r"^https?://",
                            description="the master's base URL")
    token: SecretStr = Field(default=SecretStr("change-me-worker"),
                             description="a worker token of the master (CODA_WORKER_TOKENS)")
    name: str = Field(default_factory=socket.gethostname, min_length=1, max_length=200,
                      description="the name the worker registers under")
    slots: int = Field(default=1, ge=0, le=256,
                       description="desktop slots: episodes run at once (0: judge/group jobs only)")
    job_slots: int = Field(default=1, ge=0, le=64,
                           description="judge and group jobs run at once (no desktop needed)")
    kinds: Annotated[list[JobKind], NoDecode] = Field(
        default_factory=lambda: list(JobKind),
        description="job kinds to lease: episode, judge, group (comma-separated)")
    provider: ProviderName = Field(default="local", description="where desktops come from")
    provider_options: dict[str, Any] = Field(
        default_factory=dict, repr=False, description="the provider's own options (JSON), e.g. "
        '{"template_vmx": "/vms/sb.vmx", "clones_dir": "/vms/clones"} for vmware')
    alive_interval_s: float = Field(
        default=ALIVE_INTERVAL_S, gt=0, le=3600,
        description="how often the worker renews the liveness mark on each of its desktops "
                    "(docker containers, vsphere clones), so that another worker process of "
                    "the same name never takes them for the stale ones of a dead one")
    alive_ttl_s: float = Field(
        default=ALIVE_TTL_S, gt=0, le=86_400,
        description="a liveness mark not renewed for this long is stale: the desktop's "
                    "process is gone, and another process of this worker's name removes it at "
                    "its start (which waits up to this long for a recent one); at least twice "
                    "alive_interval_s")
    screen: tuple[int, int] = Field(default=(1280, 800), description="local desktops' size")
    slot_root: Path | None = Field(default=None,
                                   description="folder of local slot directories (default: temp)")

    planner_url: str = Field(default="http://127.0.0.1:8101", pattern=r"^https?://")
    executor_url: str = Field(default="http://127.0.0.1:8102", pattern=r"^https?://")
    judge_url: str = Field(default="http://127.0.0.1:8103", pattern=r"^https?://")
    service_token: SecretStr | None = Field(
        default=None, description="inference token of the model services (all three)")

    model_timeout_s: float = Field(default=300.0, gt=0, description="per model-service call")
    master_timeout_s: float = Field(default=30.0, gt=0, description="per master call")
    master_patience_s: float = Field(
        default=45.0, ge=0, le=3600,
        description="how long a call to the master retries a master that does not answer (or "
                    "answers 502 / 503 / 504: restarting, its database or Redis away), with "
                    "backoff, before it fails: keep it below the master's lease TTL (60 s) so a "
                    "master outage shorter than that costs no running episode its attempt")
    provider_probe_s: float = Field(
        default=1.0, gt=0, le=600,
        description="the desktop provider's infrastructure failed (unreachable, credentials "
                    "refused, template or image missing): the job goes back uncounted, no "
                    "episode is leased, and the provider is probed after this long, then twice "
                    "as long each time up to provider_probe_max_s, until it answers")
    provider_probe_max_s: float = Field(default=30.0, gt=0, le=3600,
                                        description="the longest pause between two probes")
    lease_wait_s: float = Field(default=5.0, ge=0, le=60, description="long poll when idle")
    service_wait_s: float = Field(
        default=300.0, ge=0,
        description="after an attempt failed because a model service was down (its model "
                    "server killed or restarting), the slot waits up to this long for the "
                    "service's /readyz before taking its next job, so the requeued attempts "
                    "are not spent while it is down")
    heartbeat_interval_s: float = Field(default=10.0, gt=0,
                                        description="job and worker heartbeats")
    step_report_window_s: float = Field(
        default=5.0, ge=0, le=3600,
        description="a slot's step report waits up to this long to go to the master with the "
                    "other slots' in one call (POST /v1/jobs/steps); one that a slot waits for "
                    "goes at once. 0: one call per step")
    drain_grace_s: float = Field(default=60.0, ge=0,
                                 description="SIGTERM: running jobs get this long to finish")
    max_steps: int | None = Field(default=None, ge=1, le=1000,
                                  description="cap on steps per episode (default: the task's)")
    settle_timeout_s: float = Field(default=5.0, ge=0,
                                    description="wait for the screen to settle after an action")
    osworld_settle_s: float = Field(
        default=OSWORLD_PAUSE_S, ge=0,
        description="on an OSWorld / ScienceBoard guest server, the settle after an action: this "
        "fixed pause (their client's), then one screenshot, instead of polling screenshots "
        "(their server leaks an X connection per screenshot); capped by settle_timeout_s")
    osworld_screenshot_budget: int = Field(
        default=OSWORLD_SCREENSHOT_BUDGET, ge=1, le=250,
        description="screenshots one boot of an OSWorld / ScienceBoard guest server may be sent "
        "(it fails near 250); the next step's screenshot past it fails the attempt and the "
        "desktop is recycled at the next reset")
    app_ready_timeout_s: float = Field(
        default=30.0, ge=0, description="after setup, wait this long for the task's window")
    temperature: float = Field(default=0.0, ge=0, le=2,
                               description="planner sampling temperature during episodes")
    max_tokens: int = Field(default=512, ge=1, le=32_768, description="planner tokens per step")
    executor_temperature: float = Field(default=0.0, ge=0, le=2,
                                        description="executor sampling temperature")
    executor_max_tokens: int = Field(default=256, ge=1, le=32_768,
                                     description="executor tokens per action")
    group_temperature: float = Field(default=1.0, gt=0, le=2,
                                     description="planner temperature of a GRPO group")
    checker_errata: bool = Field(
        default=False,
        description="judge tasks whose own checker is known to be wrong by a corrected checker "
        "(the instruction's verdict; docs/coverage.md, Known checker defects) instead of the "
        "task's (ScienceBoard's verdict, the default: results comparable with its paper)")
    judge_policy: JudgePolicy = Field(default_factory=JudgePolicy,
                                      description="votes, frames, resolutions (JSON)")

    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING")

    @field_validator("kinds", mode="before")
    @classmethod
    def _split(cls, v: object) -> object:
        if isinstance(v, str) and not v.lstrip().startswith("["):
            return [k.strip() for k in v.split(",") if k.strip()]
        return v

    @model_validator(mode="after")
    def _alive(self) -> WorkerSettings:
        if self.alive_ttl_s < 2 * self.alive_interval_s:
            raise ValueError(f"alive_ttl_s ({self.alive_ttl_s:g}) is shorter than two renewals "
                             f"of alive_interval_s ({self.alive_interval_s:g})")
        return self

    def screenshot_budget(self) -> ScreenshotBudget:
        """How desktops spend screenshots on a leaking guest server (OSWorld's)."""
        return ScreenshotBudget(pause_s=self.osworld_settle_s,
                                per_boot=self.osworld_screenshot_budget)
