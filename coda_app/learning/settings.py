"""Settings of ``coda learn`` (environment prefix ``CODA_LEARN_``; flags override them).

The defaults run the loop on this machine's CPUs: the tiny planner built for the run, the
frozen executor and the judge answering from the curricula's recordings, local Xvfb desktops.
The general models need no recording: the OCR executor (``{"backend": "ocr", "model":
"rapidocr"}``) and the rule-based judge (``{"backend": "rules"}``). The same run with the
paper's models is a change of these settings (``docs/trainer.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from coda.contracts.services_api import JudgePolicy, ModelName
from coda.inference.spec import BackendSpec
from judge_service.settings import JudgeModelSpec
from trainer.config import RewardControl

ROOT = Path(__file__).resolve().parents[2]
CURRICULA = ROOT / "examples" / "learning"
LORA_TARGETS = (r".*(language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|"
                r"down_proj)|lm_head)")
"""The tiny model's final norm caps how peaked its output gets unless the output projection
trains too, so the run's LoRA covers ``lm_head`` (the trainer's default leaves it out)."""

OCR_EXECUTOR: dict[str, Any] = {"backend": "ocr", "model": "rapidocr"}
"""The general frozen executor: grounds plans on the screenshot's OCR text (no recording)."""
RULES_JUDGE: dict[str, Any] = {"backend": "rules"}
"""The general judge: frames, actions and the task's checker verdict (no model, no recording)."""


class LearnJudgeSpec(JudgeModelSpec):
    """The run's judge: a :class:`judge_service.settings.JudgeModelSpec` whose name defaults to
    ``judge``; ``{"backend": "rules"}`` needs no model."""

    name: ModelName = Field(default="judge", description="name used in votes")


class LearnSettings(BaseSettings):
    """The closed loop: what runs it, how long, and what it is measured against."""

    model_config = SettingsConfigDict(env_prefix="CODA_LEARN_", extra="ignore")

    home: Path = Field(default=Path(".coda-learn"),
                       description="runs (stores, logs, artifacts, results) and the cached warm "
                                   "start go here")
    run_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]+$",
                                 description="name of the run and prefix of its versions "
                                             "(default: learn-<time>)")
    tasks: Path = Field(default=CURRICULA, description="curriculum file or folder "
                                                        "(examples/learning)")
    out: Path | None = Field(default=None, description="also write the result JSON here")
    transfer: Path | None = Field(
        default=None, description="a task file outside the curricula: the last version is "
        "also measured on it (transfer; needs the general executor and judge)")
    transfer_rollouts: int | None = Field(default=None, ge=1, le=256,
                                          description="its rollouts (default: rollouts)")

    # --- the loop ---------------------------------------------------------------------------
    updates: int = Field(default=20, ge=0, le=1000, description="GRPO updates at most")
    rollouts: int = Field(default=8, ge=1, le=64,
                          description="rollouts per task of every planner version measured")
    target: float = Field(default=0.9, ge=0, le=1,
                          description="success rate the run is to reach")
    stop_at_target: bool = Field(default=True,
                                 description="stop once a version reaches the target (the "
                                             "control run never stops early)")
    stop_at_rise: float | None = Field(
        default=None, gt=0, le=1, description="also stop once a version's success rate is this "
        "far above the first version's (a short check of learning, e.g. in CI)")
    max_idle_rounds: int = Field(default=3, ge=1,
                                 description="rounds in a row without an update before giving up")
    reward_control: RewardControl = Field(
        default=RewardControl.NONE,
        description="a control run: 'derangement' (old name 'shuffle': each plan trains on "
                    "another plan's reward, the anti-learning control), 'uniform' (each "
                    "group's rewards permuted uniformly: a null) or 'zero' (no optimizer step: "
                    "every version is the warm start); 'none' trains on the rewards")
    group_size: int = Field(default=8, ge=2, le=64, description="G plans per GRPO group")
    max_steps: int = Field(default=6, ge=1, le=100, description="steps per episode at most")
    temperature: float = Field(default=1.0, gt=0, le=2,
                               description="planner temperature of episodes and groups (the "
                                           "policy that is measured and trained)")
    max_tokens: int = Field(default=48, ge=1, description="planner tokens per plan")
    seed: int = Field(default=0)

    # --- desktops ---------------------------------------------------------------------------
    provider: Literal["local", "docker", "vsphere", "vmware"] = Field(
        default="local", description="the worker's desktop provider")
    provider_options: dict[str, Any] = Field(default_factory=dict,
                                             description="the provider's options (JSON)")
    slots: int = Field(default=2, ge=1, le=64, description="desktops running episodes at once")
    job_slots: int = Field(default=1, ge=1, le=16, description="judge and group jobs at once")

    # --- the models -------------------------------------------------------------------------
    planner_model: str | None = Field(
        default=None, description="the planner to start from: a model directory (default: a "
                                  "tiny Qwen2.5-VL built for the run, warmed up by SFT)")
    warm_up: bool = Field(default=True,
                          description="stage-2 SFT on the curricula's recorded plans first")
    executor: BackendSpec | None = Field(
        default=None, description="the executor (JSON BackendSpec, e.g. the OCR executor "
                                  "{\"backend\": \"ocr\", \"model\": \"rapidocr\"}; default: "
                                  "the curricula's recorded UI-TARS outputs, a frozen replay)")
    judge: LearnJudgeSpec | None = Field(
        default=None, description="the judge (JSON JudgeModelSpec, e.g. the rule-based judge "
                                  "{\"backend\": \"rules\"}; default: recorded verdicts keyed "
                                  "by the trajectory)")
    judge_policy: JudgePolicy = Field(
        default_factory=lambda: JudgePolicy(votes=1, multi_resolution=False),
        description="the judge jobs' policy (JSON; one vote at one resolution: the recorded "
                    "judge answers every vote alike; the paper's judge votes 4 times)")
    vocab_size: int = Field(default=2000, ge=600, description="the tiny planner's vocabulary")
    max_pixels: int = Field(default=56 * 56, ge=16 * 16,
                            description="image budget of the planner (service and trainer)")
    device: str = Field(default="cpu", description="trainer device: cpu, cuda, auto")
    torch_threads: int | None = Field(
        default=1, ge=1, description="CPU threads of torch in the trainer and the planner "
        "service (one each: the desktops, the services and the trainer share a few cores, and "
        "threads that wait on each other lose most of their time; None: torch's default)")

    # --- warm-up (stage-2 SFT) --------------------------------------------------------------
    warm_epochs: int = Field(default=40, ge=1, description="SFT passes over the warm-up rows")
    warm_learning_rate: float = Field(default=3e-3, gt=0, description="SFT learning rate")
    warm_full: bool = Field(default=True,
                            description="full fine-tuning for the warm start (else LoRA)")

    # --- GRPO -------------------------------------------------------------------------------
    learning_rate: float = Field(default=5e-3, gt=0, description="GRPO learning rate (LoRA)")
    lora_rank: int = Field(default=16, ge=1)
    lora_alpha: int = Field(default=32, ge=1)
    lora_targets: str = Field(default=LORA_TARGETS)
    groups_per_update: int = Field(default=64, ge=1,
                                   description="groups one update takes at most (a round's)")

    @field_validator("judge")
    @classmethod
    def _judge_is_a_judge(cls, v: LearnJudgeSpec | None) -> LearnJudgeSpec | None:
        if v is not None and v.backend == "ocr":
            raise ValueError("the 'ocr' backend grounds plans (executor only); the judge takes "
                             "'rules' or a model backend")
        return v

    @property
    def recorded_models(self) -> list[str]:
        """The roles served from the curricula's recordings (none: a recording-free run)."""
        return [role for role, spec in (("executor", self.executor), ("judge", self.judge))
                if spec is None]

    def run_dir(self, name: str) -> Path:
        return self.home.resolve() / "runs" / name
