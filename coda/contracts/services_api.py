"""Request and response bodies of the planner, executor and judge services."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from coda.actions import Action
from coda.contracts.training import LabelRule, Verdict

MAX_SAMPLES = 64


class ImageRef(BaseModel):
    """A screenshot by artifact key / URL, or inline as base64 PNG/JPEG."""

    model_config = ConfigDict(extra="forbid")

    ref: str | None = Field(default=None, description="artifact key or fsspec/http URL")
    b64: str | None = Field(default=None, description="base64 image bytes")

    @model_validator(mode="after")
    def _one(self) -> ImageRef:
        if (self.ref is None) == (self.b64 is None):
            raise ValueError("give exactly one of 'ref' or 'b64'")
        return self


class HistoryStep(BaseModel):
    """A past step as the models see it."""

    model_config = ConfigDict(extra="forbid")

    thought: str = Field(description="the planner's 'Thought: ...\\nAction: ...' text")
    action_text: str | None = Field(default=None, description="the executor's raw action text")
    screenshot: ImageRef | None = None


class Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=0.9, gt=0, le=1)
    max_tokens: int = Field(default=1500, ge=1, le=32_768)
    seed: int | None = None


class PlanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1)
    screenshot: ImageRef
    previous_screenshot: ImageRef | None = None
    history: list[HistoryStep] = Field(default_factory=list)
    n: int = Field(default=1, ge=1, le=MAX_SAMPLES)
    sampling: Sampling = Field(default_factory=Sampling)
    answer_mode: bool = Field(default=False, description="use the ANS prompt variant")
    adapter: str | None = Field(default=None, description="adapter version; default current")


class Plan(BaseModel):
    thought: str
    action_hint: str | None = None
    text: str = Field(description="the full model output")
    finished: bool = False
    answer: str | None = None
    version: str = Field(description="adapter version (or 'base') that produced it")
    prompt_tokens: int = 0
    completion_tokens: int = 0


class PlanResponse(BaseModel):
    plans: list[Plan]
    latency_ms: float


class AdapterLoad(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$")
    uri: str = Field(min_length=1, description="local path or fsspec URL of a peft adapter")
    make_default: bool = True


class AdapterInfo(BaseModel):
    version: str
    uri: str | None = None
    is_default: bool = False


class AdapterList(BaseModel):
    items: list[AdapterInfo]


class ActRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1)
    thought: str = Field(min_length=1)
    screenshot: ImageRef
    history: list[HistoryStep] = Field(default_factory=list)
    screen_width: int = Field(default=1280, ge=1, le=16_384)
    screen_height: int = Field(default=800, ge=1, le=16_384)
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=1.0, max_tokens=256))


class ActBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1)
    thoughts: list[str] = Field(min_length=1, max_length=MAX_SAMPLES)
    screenshot: ImageRef
    history: list[HistoryStep] = Field(default_factory=list)
    screen_width: int = Field(default=1280, ge=1, le=16_384)
    screen_height: int = Field(default=800, ge=1, le=16_384)
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
    thought: str | None = None
    action: str | None = None


class JudgePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    votes: int = Field(default=4, ge=1, le=16, description="voting@k")
    temperature: float = Field(default=1.0, ge=0, le=2)
    multi_resolution: bool = True
    low_resolution: tuple[int, int] = (960, 540)
    max_frames: int = Field(default=16, ge=2, le=256)
    models: list[str] | None = Field(default=None, description="ensemble; default configured")
    label_rule: LabelRule = LabelRule.CLEAN_ONLY


class JudgeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1)
    steps: list[JudgeStep] = Field(min_length=1)
    policy: JudgePolicy = Field(default_factory=JudgePolicy)


class JudgeResponse(BaseModel):
    verdict: Verdict
    latency_ms: float


class InstructionCheckRequest(BaseModel):
    """Is a (generated) instruction clear, executable from the start state and judgeable?"""

    model_config = ConfigDict(extra="forbid")

    instruction: str = Field(min_length=1)
    app: str = Field(min_length=1, description="the application the task is for")
    screenshot: ImageRef | None = Field(default=None, description="the initial state")
    model: str | None = Field(default=None, description="judge model; default the first one")


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


class Health(BaseModel):
    status: str = "ok"
    detail: dict[str, Any] = Field(default_factory=dict)
