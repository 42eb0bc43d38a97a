"""The judge service: ``POST /v1/judge`` and ``POST /v1/instructions/check``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI

from coda.contracts.services_api import (
    InstructionCheck,
    InstructionCheckRequest,
    JudgeRequest,
    JudgeResponse,
)
from coda.inference.base import ChatBackend, GenerateOptions, PromptTooLong
from coda.logging import get_logger
from coda.modelservice.app import (
    INFERENCE,
    ROUTE_ERRORS,
    create_model_app,
    get_state,
    too_long,
)
from coda.modelservice.state import ModelState
from coda.prompts.judge import build_instruction_messages
from coda.service import FieldError, current_cancel_event
from judge_service import judging
from judge_service.frames import high_url
from judge_service.parsing import parse_instruction_check
from judge_service.rules import RuleJudge
from judge_service.settings import JudgeSettings

log = get_logger("judge_service")

StateDep = Annotated[ModelState, Depends(get_state)]
router = APIRouter(prefix="/v1", tags=["judge"])


def settings_of(st: ModelState) -> JudgeSettings:
    assert isinstance(st.settings, JudgeSettings)
    return st.settings


def select_models(st: ModelState, names: list[str] | None, loc: tuple[str, ...],
                  ) -> dict[str, ChatBackend]:
    """The configured models named by ``names`` (all when None); 422 at ``loc`` otherwise."""
    st.require_loaded()
    if names is None:
        return dict(st.backends)
    unknown = [n for n in names if n not in st.backends]
    if unknown or not names:
        raise FieldError(["body", *loc], f"unknown judge model(s) {unknown}; "
                                         f"configured: {list(st.backends)}")
    return {n: st.backends[n] for n in dict.fromkeys(names)}


@router.post("/judge", response_model=JudgeResponse, dependencies=INFERENCE,
             responses=ROUTE_ERRORS)
async def judge(req: JudgeRequest, st: StateDep) -> JudgeResponse:
    """Judge a trajectory: multi-resolution filter, voting@k, ensemble; every vote returned."""
    start = time.perf_counter()
    models = select_models(st, req.policy.models, ("policy", "models"))
    try:
        verdict = await judging.judge(req, models, settings_of(st), st.reader)
    except PromptTooLong as exc:
        texts: list[tuple[tuple[str | int, ...], str | None]] = [
            (("body", "instruction"), req.instruction)]
        for i, step in enumerate(req.steps):
            texts += [(("body", "steps", i, "thought"), step.thought),
                      (("body", "steps", i, "action"), step.action)]
        raise too_long(exc, texts) from None
    latency = (time.perf_counter() - start) * 1000
    log.info("judge.verdict", steps=len(req.steps), correct=verdict.correct,
             votes=len(verdict.votes), latency_ms=round(latency, 1))
    return JudgeResponse(verdict=verdict, latency_ms=latency)


@router.post("/instructions/check", response_model=InstructionCheck, dependencies=INFERENCE,
             responses=ROUTE_ERRORS)
async def check_instruction(req: InstructionCheckRequest, st: StateDep) -> InstructionCheck:
    """Is a generated instruction clear, executable from the initial state and judgeable?"""
    models = select_models(st, [req.model] if req.model else None, ("model",))
    name, backend = next(iter(models.items()))
    settings = settings_of(st)
    url = None
    if req.screenshot is not None:
        checked = await st.reader.aread(req.screenshot, ("screenshot",))
        url = high_url(checked, settings.high_max_pixels)
    messages = build_instruction_messages(req.app, req.instruction, url)
    options = GenerateOptions(n=1, temperature=0.0, top_p=1.0, max_tokens=settings.max_tokens,
                              cancel=current_cancel_event())
    try:
        [completion] = await backend.chat(messages, options)
    except PromptTooLong as exc:
        raise too_long(exc, [(("body", "instruction"), req.instruction),
                             (("body", "app"), req.app)]) from None
    clear, executable, judgeable, reason, parsed = parse_instruction_check(completion.text)
    log.info("judge.instruction_checked", model=name, parsed=parsed, clear=clear,
             executable=executable, judgeable=judgeable)
    return InstructionCheck(clear=clear, executable=executable, judgeable=judgeable,
                            reason=reason, parsed=parsed, raw=completion.text)


def create_app(settings: JudgeSettings | None = None, *,
               backends: Mapping[str, ChatBackend] | None = None) -> FastAPI:
    """The judge app; ``backends`` (name -> backend) overrides the configured models."""
    cfg = settings or JudgeSettings()
    if backends is None and not cfg.models:
        raise ValueError("no judge model configured: set CODA_JUDGE_MODELS to a JSON list like "
                         '[{"name": "qwen72b", "backend": "openai", '
                         '"base_url": "http://vllm-judge:8000/v1", "model": "..."}]')
    state = ModelState(cfg, {m.name: m.spec() for m in cfg.models if not m.is_rules}, backends)
    if backends is None:  # the rule-based judge is built here: it loads nothing
        state.backends.update({m.name: RuleJudge() for m in cfg.models if m.is_rules})
        state.names = [m.name for m in cfg.models]
    return create_model_app(
        state, name="coda-judge",
        description="CODA judge: trajectory verdicts with voting, multi-resolution, ensemble",
        routers=[router])
