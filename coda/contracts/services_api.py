"""Request and response bodies of the planner, executor and judge services.

Every bound a service needs to stay up under hostile input that does not depend on its
settings is here, so the OpenAPI documents show it: text lengths, list lengths, a 64-bit
seed, adapter names, screenshot keys. Strings refuse NUL characters and lone surrogates
(:data:`Text`): neither can reach a tokenizer, a log line or an error message.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from coda.actions import Action
from coda.bounds import MAX_TOKENS, Pixels
from coda.contracts.history import MAX_HISTORY as MAX_HISTORY
from coda.contracts.history import MAX_TEXT as MAX_TEXT
from coda.contracts.history import SCREENSHOT_KEY as SCREENSHOT_KEY
from coda.contracts.history import HistoryStep as HistoryStep
from coda.contracts.history import ImageRef as ImageRef
from coda.contracts.history import Text as Text
from coda.contracts.training import LabelRule, Verdict

MAX_SAMPLES = 64
MAX_SEED = 2**63 - 1
VERSION_PATTERN = r"^[A-Za-z0-9._:-]+$"
BASE_VERSION = "base"
"""The version name of the planner without any adapter (the model as loaded). Services answer
with it, the master and the trainer start from it, and a step or candidate it produced carries
``planner_version=None``."""


def stored_version(version: str) -> str | None:
    """The version a record stores for a plan's version: ``None`` for the base model."""
    return None if version == BASE_VERSION else version


Version = Annotated[str, Field(min_length=1, max_length=200, pattern=VERSION_PATTERN)]


class Sampling(BaseModel):
    """Sampling options; a temperature below 1e-4 decodes greedily. ``max_tokens`` is further
    bounded by the service's setting (422 above it)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=0.9, gt=0, le=1)
    max_tokens: int = Field(default=1500, ge=1, le=MAX_TOKENS)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, description="64-bit seed")


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: Text = Field(min_length=1, max_length=MAX_TEXT)
    screenshot: ImageRef
    previous_screenshot: ImageRef | None = None
    history: list[HistoryStep] = Field(default_factory=list, max_length=MAX_HISTORY)
    n: int = Field(default=1, ge=1, le=MAX_SAMPLES)
    sampling: Sampling = Field(default_factory=Sampling)
    answer_mode: bool = Field(default=False, description="use the ANS prompt variant")
    adapter: Version | None = Field(default=None, description="adapter version; default current")
    return_logprobs: bool = Field(
        default=False, description="also return each plan's token ids and per-token "
        "log-probabilities at the sampling temperature (for GRPO importance correction)")


class Plan(BaseModel):
    thought: str
    action_hint: str | None = None
    text: str = Field(description="the full model output")
    finished: bool = False
    answer: str | None = None
    version: str = Field(description="adapter version (or 'base') that produced it")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_ids: list[int] | None = Field(default=None, description="when return_logprobs")
    logprobs: list[float] | None = Field(default=None, description="when return_logprobs")


class PlanResponse(BaseModel):
    plans: list[Plan]
    latency_ms: float


class AdapterLoad(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Version
    uri: Text = Field(min_length=1, max_length=1000, description=(
        "where the peft adapter is: a folder of the artifact store, relative to its base URL "
        "(adapters/run1/step-10), or an absolute local path inside one of the service's "
        "adapter roots"))
    make_default: bool = True


class AdapterInfo(BaseModel):
    version: str
    uri: str | None = None
    is_default: bool = False


class AdapterList(BaseModel):
    items: list[AdapterInfo]


class ActRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: Text = Field(min_length=1, max_length=MAX_TEXT)
    thought: Text = Field(min_length=1, max_length=MAX_TEXT)
    screenshot: ImageRef
    history: list[HistoryStep] = Field(default_factory=list, max_length=MAX_HISTORY)
    screen_width: Pixels = 1280
    screen_height: Pixels = 800
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=1.0, max_tokens=256))


class ActBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: Text = Field(min_length=1, max_length=MAX_TEXT)
    thoughts: list[Annotated[Text, Field(min_length=1, max_length=MAX_TEXT)]] = Field(
        min_length=1, max_length=MAX_SAMPLES)
    screenshot: ImageRef
    history: list[HistoryStep] = Field(default_factory=list, max_length=MAX_HISTORY)
    screen_width: Pixels = 1280
    screen_height: Pixels = 800
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=1.0, max_tokens=256))


class ParseError(BaseModel):
    message: str
    text: str


class ActResult(BaseModel):
    action: Action | None = None
    pyautogui: str | None = None
    raw: str
    error: ParseError | None = None
    latency_ms: float = 0


class ActBatchResponse(BaseModel):
    results: list[ActResult]
    latency_ms: float


class JudgeStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    screenshot: ImageRef
    thought: Text | None = Field(default=None, max_length=MAX_TEXT)
    action: Text | None = Field(default=None, max_length=MAX_TEXT)


Side = Annotated[int, Field(ge=28, le=8192)]
ModelName = Annotated[Text, Field(min_length=1, max_length=200)]


class JudgePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    votes: int = Field(default=4, ge=1, le=16, description="voting@k")
    temperature: float = Field(default=1.0, ge=0, le=2)
    multi_resolution: bool = True
    low_resolution: tuple[Side, Side] = Field(default=(960, 540),
                                              description="(width, height) of the first pass")
    max_frames: int = Field(default=16, ge=2, le=256)
    models: list[ModelName] | None = Field(default=None, max_length=16,
                                           description="ensemble; default configured")
    label_rule: LabelRule = LabelRule.CLEAN_ONLY


class JudgeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: Text = Field(min_length=1, max_length=MAX_TEXT)
    steps: list[JudgeStep] = Field(min_length=1, max_length=1024)
    policy: JudgePolicy = Field(default_factory=JudgePolicy)
    checker_success: bool | None = Field(
        default=None, description="the task's checker verdict (None: no checker decided, or not "
        "sent); judge models ignore it, the rule-based judge takes correctness from it")


class JudgeResponse(BaseModel):
    verdict: Verdict
    latency_ms: float


class InstructionCheckRequest(BaseModel):
    """Is a (generated) instruction clear, executable from the start state and judgeable?"""

    model_config = ConfigDict(extra="forbid")

    instruction: Text = Field(min_length=1, max_length=MAX_TEXT)
    app: Text = Field(min_length=1, max_length=200, description="the application the task is for")
    screenshot: ImageRef | None = Field(default=None, description="the initial state")
    model: ModelName | None = Field(default=None, description="judge model; default the first one")


class InstructionCheck(BaseModel):
    clear: bool
    executable: bool
    judgeable: bool
    reason: str | None = None
    parsed: bool = Field(description="False when the judge's reply did not parse")
    raw: str

    @property
    def ok(self) -> bool:
        return self.parsed and self.clear and self.executable and self.judgeable
