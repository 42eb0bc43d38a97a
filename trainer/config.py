"""Trainer settings: one class, environment variables prefixed ``CODA_TRAINER_``.

Every field says what it does; defaults follow the field (``reference/grpo.md``): G = 8 plans
per group (set by the worker), eps_low = eps_high = 0.2, beta = 0, token-mean aggregation,
LoRA on the language model's linear layers.
"""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Any

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from coda.contracts.services_api import BASE_VERSION


class Aggregation(StrEnum):
    """How the GRPO loss is averaged over a batch (:mod:`trainer.grpo.losses`)."""

    TOKEN_MEAN = "token_mean"
    SEQ_MEAN = "seq_mean"
    DR_GRPO = "dr_grpo"


class RewardControl(StrEnum):
    """A control experiment on what the trainer learns from (:mod:`trainer.grpo.losses`,
    ``docs/trainer.md``): a run that learns must do better than each of them."""

    NONE = "none"
    DERANGEMENT = "derangement"
    """The ANTI-learning control: each group's rewards permuted among its plans by a derangement
    (seeded by the group), so no plan keeps its own. In expectation a plan then gets the mean
    of the OTHER plans' rewards, i.e. ``-1/(G-1)`` of its own advantage: the policy is pushed
    the wrong way, and a falling curve is what it should show. ``shuffle`` is its old name
    (still accepted)."""
    UNIFORM = "uniform"
    """A null: each group's rewards permuted by a uniform random permutation (seeded by the
    group; a plan may keep its own reward). In expectation every advantage is zero, but each
    update still moves the policy (towards plans picked at random)."""
    ZERO = "zero"
    """No optimizer step at all: the trainer leases, consumes and measures the groups and
    publishes versions, but the weights (and the optimizer's state) never change; every
    version is the starting policy. The loop's measurement noise alone."""

    @classmethod
    def _missing_(cls, value: object) -> RewardControl | None:
        if isinstance(value, str) and value.lower() in DEPRECATED_CONTROLS:
            return cls(DEPRECATED_CONTROLS[value.lower()])
        return None


DEPRECATED_CONTROLS = {"shuffle": "derangement"}
"""Old names of the controls, still accepted (configs, environments, command lines)."""


class Precision(StrEnum):
    AUTO = "auto"
    """bf16 where the hardware has it (a CUDA GPU with bf16), fp32 elsewhere."""
    FP32 = "fp32"
    BF16 = "bf16"


def overrides(**options: Any) -> dict[str, Any]:
    """Command-line options that were given (the rest comes from the environment / .env)."""
    return {k: v for k, v in options.items() if v not in (None, [], ())}


class TrainerConfig(BaseSettings):
    """What the trainer trains, from where, how, and where the versions go."""

    model_config = SettingsConfigDict(env_prefix="CODA_TRAINER_", env_file=".env",
                                      extra="ignore")

    # --- where things are -------------------------------------------------------------------
    master_url: str = Field(default="http://127.0.0.1:8000",
                            description="the master: groups are leased and acked there, "
                                        "versions and metrics registered there")
    master_token: SecretStr | None = Field(
        default=None, description="admin token of the master (leases groups, registers "
                                  "versions); CODA_ADMIN_TOKEN works too")
    model: str = Field(default="Qwen/Qwen2.5-VL-32B-Instruct",
                       description="base planner: a local model directory (weights are never "
                                   "downloaded at run time)")
    artifacts_url: str = Field(default="file://./.coda/artifacts",
                               description="fsspec URL of the artifact store the screenshot "
                                           "keys of the groups refer to")
    publish_url: str | None = Field(default=None,
                                    description="fsspec URL under which versioned adapters are "
                                                "written; default <artifacts_url>/adapters")
    checkpoint_dir: str = Field(default=".coda/trainer",
                                description="local directory of checkpoints (adapter, optimizer, "
                                            "consumed groups); the trainer resumes from it")
    planner_urls: list[str] = Field(default_factory=list,
                                    description="planner services that load each new version, "
                                                "one replica at a time (JSON list in the env)")
    planner_token: SecretStr | None = Field(
        default=None, description="bearer token of the planner services, if any")
    run_name: str = Field(default="grpo", pattern=r"^[A-Za-z0-9._-]+$",
                          description="prefix of version names: <run_name>-<update>")
    initial_version: str = Field(default=BASE_VERSION,
                                 description="version name of the policy the run starts from "
                                             "(what the planner tags plans of the base model with)")

    # --- the policy -------------------------------------------------------------------------
    lora: bool = Field(default=True, description="train a LoRA adapter (peft); False = full "
                                                 "fine-tuning (no versioned adapter then)")
    lora_rank: int = Field(default=16, ge=1, description="LoRA rank r")
    lora_alpha: int = Field(default=32, ge=1, description="LoRA alpha (scale = alpha / r)")
    lora_dropout: float = Field(default=0.0, ge=0, lt=1, description="LoRA dropout")
    lora_targets: str = Field(
        default=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
        description="regex of the modules LoRA wraps (the language model's linear layers; "
                    "the vision tower stays frozen)")
    init_adapter: str | None = Field(default=None,
                                     description="start from this peft adapter directory")
    precision: Precision = Field(default=Precision.AUTO, description="auto, fp32 or bf16")
    device: str = Field(default="auto", description="'auto' (cuda when present), 'cpu', 'cuda'")
    gradient_checkpointing: bool = Field(default=False,
                                         description="recompute activations in backward")
    max_pixels: int | None = Field(default=None,
                                   description="image budget per screenshot; MUST equal the "
                                               "planner service's (CODA_PLANNER_MAX_PIXELS)")
    max_turns: int = Field(default=15, ge=0, description="past turns in the prompt (as the "
                                                          "planner service)")
    keep_images: int = Field(default=1, ge=0, description="past screenshots kept in the prompt "
                                                          "(as the planner service)")
    answer_mode: bool = Field(default=False, description="the ANS prompt variant")
    shared_prompt: bool = Field(default=True,
                                description="encode a group's prompt once for its G plans "
                                            "(False: each plan's full input separately)")

    # --- the update ---------------------------------------------------------------------------
    groups_per_update: int = Field(default=8, ge=1,
                                   description="groups leased and trained on per update")
    groups_per_micro_step: int = Field(default=1, ge=1,
                                       description="groups per forward/backward (gradient "
                                                   "accumulation over the update's groups)")
    epochs_per_update: int = Field(default=1, ge=1,
                                   description="optimisation passes over each batch (mu); with "
                                               "1, logp_old = logp.detach() and rho = 1")
    learning_rate: float = Field(default=1e-5, gt=0, description="AdamW learning rate")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay")
    warmup_updates: int = Field(default=0, ge=0, description="linear warm-up of the LR")
    max_grad_norm: float | None = Field(default=1.0, description="gradient clipping (None: off)")
    eps_low: float = Field(default=0.2, ge=0, lt=1, description="lower clip: 1 - eps_low")
    eps_high: float = Field(default=0.2, ge=0, description="upper clip: 1 + eps_high (DAPO 0.28)")
    beta: float = Field(default=0.0, ge=0,
                        description="k3 KL coefficient against the reference policy (LoRA: the "
                                    "base model, adapter disabled)")
    scale_std: bool = Field(default=True, description="divide advantages by the group's std "
                                                      "(False: Dr. GRPO)")
    adv_eps: float = Field(default=1e-4, gt=0, description="eps of the std normalisation")
    aggregation: Aggregation = Field(default=Aggregation.TOKEN_MEAN,
                                     description="token_mean, seq_mean or dr_grpo")
    norm_len: int | None = Field(default=None, ge=1,
                                 description="Dr. GRPO length constant (default: longest plan)")
    tis_cap: float | None = Field(default=2.0, gt=0,
                                  description="truncated importance sampling cap on "
                                              "pi_old / pi_sampler where plans carry the "
                                              "sampler's log-probabilities (None: no correction)")
    max_staleness: int = Field(default=4, ge=0,
                               description="groups sampled more than this many versions behind "
                                           "the trained policy are dropped (acked 'dropped')")
    temperature: float = Field(default=1.0, gt=0,
                               description="the planner's sampling temperature (CODA: 1.0); "
                                           "log-probs are taken at logits / temperature, the "
                                           "distribution the plans were sampled from")
    seed: int = Field(default=0, description="torch seed")
    reward_control: RewardControl = Field(
        default=RewardControl.NONE,
        description="a control experiment: 'derangement' (alias 'shuffle') gives each plan "
                    "another plan's reward (anti-learning), 'uniform' permutes each group's "
                    "rewards uniformly (a null), 'zero' takes no optimizer step at all (the "
                    "weights never change); 'none' trains on the rewards")

    # --- the loop -----------------------------------------------------------------------------
    publish_every: int = Field(default=1, ge=1, description="publish a version every K updates")
    keep_loaded: int = Field(default=2, ge=1,
                             description="versions kept loaded in each planner service")
    checkpoint_every: int = Field(default=1, ge=1,
                                  description="checkpoint every N updates (groups are acked "
                                              "only after the checkpoint that includes them)")
    keep_checkpoints: int = Field(default=2, ge=1, description="checkpoints kept on disk")
    max_updates: int | None = Field(default=None, ge=1,
                                    description="stop after this many updates (None: run on)")
    lease_ttl_s: float = Field(default=600, ge=1, description="group lease TTL at the master")
    poll_s: float = Field(default=2.0, gt=0, description="wait between empty lease attempts")
    idle_exit_s: float | None = Field(default=None, gt=0,
                                      description="exit after this long without groups")
    tensorboard_dir: str | None = Field(default=None,
                                        description="write TensorBoard logs here (needs the "
                                                    "'tensorboard' extra)")
    log_level: str = "INFO"

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        if self.groups_per_micro_step > self.groups_per_update:
            raise ValueError("groups_per_micro_step: must be <= groups_per_update")
        return self

    def master_bearer(self) -> str | None:
        """The token the trainer sends to the master: ``master_token``, else $CODA_ADMIN_TOKEN."""
        if self.master_token is not None:
            return self.master_token.get_secret_value()
        return os.environ.get("CODA_ADMIN_TOKEN")

    def planner_bearer(self) -> str | None:
        """The token the trainer sends to the planner services (None: no token)."""
        return self.planner_token.get_secret_value() if self.planner_token is not None else None

    def adapter_root(self) -> str:
        """Where versioned adapters are written."""
        return (self.publish_url or f"{self.artifacts_url.rstrip('/')}/adapters").rstrip("/")

    def planner_uri(self, written: str, version: str) -> str:
        """How a planner service is told where ``version`` is: a folder relative to the
        artifact store when it was written inside it (the planner reads the store through
        its own configured URL), else the URL it was written to (then the planners must list
        that place in ``CODA_PLANNER_ADAPTER_ROOTS``)."""
        store = self.artifacts_url.rstrip("/")
        root = self.adapter_root()
        if root == store or root.startswith(store + "/"):
            return f"{root[len(store):].strip('/')}/{version}".lstrip("/")
        return written
