"""Trainer tests: a real planner service process on the tiny model, screenshots in the master's
artifact store, and groups built the way the worker's group job will build them.

The worker's group job is a later issue. Until then the tests build groups themselves: the
real planner service samples G plans at a stored state (``POST /v1/plan``, n = G, seeded), and
each plan is scored by :func:`synthetic_reward`, a deterministic reward of the plan TEXT that
stands in for the executor + action reward of the real system.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from pathlib import Path

import pytest

from coda.actions import Click
from coda.artifacts import ArtifactStore
from coda.clients.planner import PlannerClient
from coda.contracts.services_api import HistoryStep, ImageRef, PlanRequest, Sampling
from coda.contracts.training import Candidate, Group, StateRef
from coda_app.services import ServiceProcess
from tests.fixtures.images import image_bytes
from tests.fixtures.services import TOKENS

ROOT = Path(__file__).resolve().parents[2]
MAX_PIXELS = 112 * 112
SCREEN = (112, 84)
"""The test screenshots' size."""
INSTRUCTION = "Open the File menu and save the document"
CLICK = Click(x=10, y=20)
LORA_TARGETS = (r".*(language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|"
                r"down_proj)|lm_head)")
"""The tiny model's final norm caps how peaked its output can get without training the output
projection, so the trainer tests put LoRA on ``lm_head`` too (the default leaves it out)."""


def synthetic_reward(text: str) -> float:
    """The synthetic task (a stand-in reward, deterministic in the plan text): the share of the
    plan's characters that are lowercase ASCII letters or spaces. Characters the tokenizer could
    not decode (U+FFFD) are not counted — the random tiny model emits stray bytes, which the
    service returns as U+FFFD and which re-tokenize to other tokens than the sampled ones.
    A plan with no countable character scores 0."""
    chars = [c for c in text if c != "\ufffd"]
    if not chars:
        return 0.0
    return sum(c in string.ascii_lowercase + " " for c in chars) / len(chars)


@pytest.fixture
def artifacts_dir(master) -> Path:  # type: ignore[no-untyped-def]
    """The master's artifact store (a local directory): screenshots and adapters go there."""
    return Path(master.env["CODA_ARTIFACTS_URL"])


@pytest.fixture
def planner_process(tiny_model_dir: Path, artifacts_dir: Path,
                    tmp_path: Path) -> Iterator[ServiceProcess]:
    """The planner service (the shared harness's process) reading the master's store."""
    from planner_service.settings import PlannerSettings

    settings = PlannerSettings(
        backend="transformers", model=str(tiny_model_dir), device="cpu", max_pixels=MAX_PIXELS,
        artifacts_url=f"file://{artifacts_dir}",
        adapter_cache_dir=str(tmp_path / "adapter-cache"), log_level="WARNING", **TOKENS.env())
    proc = ServiceProcess.of("planner", settings, tmp_path / "planner.log")
    proc.start()
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def store_screens(artifacts_dir: Path) -> tuple[str, str]:
    """Two screenshots in the store: the current one and the previous step's."""
    store = ArtifactStore(f"file://{artifacts_dir}")
    return store.put(image_bytes(SCREEN, (200, 30, 30)), "image/png"), store.put(
        image_bytes(SCREEN, (20, 90, 200)), "image/png")


def make_state(screen: str, previous: str) -> StateRef:
    return StateRef(step_index=1, instruction=INSTRUCTION, app="demo", screenshot=screen,
                    screen_width=112, screen_height=84, previous_screenshot=previous,
                    history=[HistoryStep(thought="Thought: open the menu\nAction: click",
                                         action_text="click(start_box='(1,2)')",
                                         screenshot=ImageRef(ref=previous))])


async def sample_group(planner: PlannerClient, state: StateRef, *, n: int, seed: int,
                       max_tokens: int = 4, logprobs: bool = False) -> Group:
    """G plans from the real planner service at ``state``, scored by :func:`synthetic_reward`."""
    req = PlanRequest(
        instruction=state.instruction, screenshot=ImageRef(ref=state.screenshot),
        previous_screenshot=ImageRef(ref=state.previous_screenshot)
        if state.previous_screenshot else None,
        history=state.history,
        n=n, sampling=Sampling(temperature=1.0, top_p=0.9, max_tokens=max_tokens, seed=seed),
        return_logprobs=logprobs)
    plans = (await planner.plan(req)).plans
    # Postgres cannot store NUL in text (the master refuses it); the random model emits some
    texts = [p.text.replace("\x00", "\ufffd") for p in plans]
    candidates = [Candidate(plan=t, reward=synthetic_reward(t), planner_version=p.version,
                            token_count=p.completion_tokens, token_ids=p.token_ids,
                            logprobs=p.logprobs) for t, p in zip(texts, plans, strict=True)]
    return Group(state=state, target=CLICK, candidates=candidates,
                 planner_version=plans[0].version)
