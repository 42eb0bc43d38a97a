"""What the follow-up jobs ask the services (issue 37). A group job samples its plans from the
distribution their log-probs describe: ``top_p=1`` and log-probs asked for (the services apply
no top-k), so the trainer's importance ratio is of the distribution the plans were drawn from
(point 5; episodes keep their own sampling settings: their plans are not trained on). A judge
job sends the task's checker verdict, which the rule-based judge takes correctness from
(point 2)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from coda.actions import Click
from coda.contracts.jobs import GroupJob, GroupJobPayload, JobKind, JudgeJob, JudgeJobPayload
from coda.contracts.records import Episode, EpisodeStatus, Step
from coda.contracts.services_api import (
    BASE_VERSION,
    ActBatchRequest,
    ActBatchResponse,
    ActResult,
    JudgeRequest,
    JudgeResponse,
    Plan,
    PlanRequest,
    PlanResponse,
)
from coda.contracts.training import Verdict
from coda.plans import plan_record
from worker.followups import run_group, run_judge
from worker.settings import WorkerSettings

KEY = "sha256/ab/" + "a" * 64 + ".png"
CLICK = Click(x=10, y=20)
TEXT = "Thought: open the menu.\nAction: click the File menu"


class Master:
    def __init__(self, episode: Episode) -> None:
        self.episode = episode

    async def get_episode(self, episode_id: uuid.UUID, *, steps: bool = False) -> Episode:
        return self.episode


class Planner:
    def __init__(self) -> None:
        self.asked: list[PlanRequest] = []

    async def plan(self, req: PlanRequest) -> PlanResponse:
        self.asked.append(req)
        plans = [Plan(thought="open the menu.", text=TEXT, version=BASE_VERSION,
                      token_ids=[1, 2], logprobs=[-0.5, -0.25]) for _ in range(req.n)]
        return PlanResponse(plans=plans, latency_ms=1.0)


class Executor:
    async def act_batch(self, req: ActBatchRequest) -> ActBatchResponse:
        return ActBatchResponse(results=[ActResult(action=CLICK, raw="click(start_box='(10,20)')")
                                         for _ in req.thoughts], latency_ms=0.0)


class Judge:
    def __init__(self) -> None:
        self.asked: list[JudgeRequest] = []

    async def judge_request(self, req: JudgeRequest) -> JudgeResponse:
        self.asked.append(req)
        return JudgeResponse(verdict=Verdict(correct=bool(req.checker_success)), latency_ms=1.0)


def _episode() -> Episode:
    plan = Plan(thought="open the menu.", text=TEXT, version=BASE_VERSION)
    step = Step.model_validate({
        "index": 0, "attempt": 1, "thought": TEXT, "screenshot": KEY,
        "screen": {"width": 1280, "height": 800}, "action": CLICK.model_dump(mode="json"),
        "plan": plan_record(plan, answer_mode=False).model_dump(mode="json")})
    return Episode(id=uuid.uuid4(), batch_id=uuid.uuid4(), job_id=uuid.uuid4(), task_id="t",
                   app="TeXstudio", rollout=0, status=EpisodeStatus.COMPLETED,
                   created_at=datetime.now(UTC), steps=[step], instruction="open the menu")


async def test_a_group_samples_the_whole_distribution_with_log_probs() -> None:
    episode = _episode()
    planner = Planner()
    job = GroupJob(id=uuid.uuid4(), lease_token="t", attempt=1, max_attempts=3,
                   lease_expires_at=datetime.now(UTC) + timedelta(minutes=5),
                   kind=JobKind.GROUP, payload=GroupJobPayload(
                       episode_id=episode.id, attempt=1, step_index=0, group_size=4))
    settings = WorkerSettings()
    result = await run_group(job, master=Master(episode), planner=planner,  # type: ignore[arg-type]
                             executor=Executor(), settings=settings)  # type: ignore[arg-type]
    [req] = planner.asked
    assert req.sampling.top_p == 1.0, "a truncated nucleus is not what the log-probs describe"
    assert req.sampling.temperature == settings.group_temperature
    assert req.return_logprobs and req.n == 4
    assert all(c.logprobs == [-0.5, -0.25] for c in result.group.candidates)


@pytest.mark.parametrize("success", [True, False, None])
async def test_a_judge_job_sends_the_checkers_verdict(success: bool | None) -> None:
    episode = _episode().model_copy(update={"success": success})
    judge = Judge()
    job = JudgeJob(id=uuid.uuid4(), lease_token="t", attempt=1, max_attempts=3,
                   lease_expires_at=datetime.now(UTC) + timedelta(minutes=5),
                   kind=JobKind.JUDGE, payload=JudgeJobPayload(episode_id=episode.id))
    await run_judge(job, master=Master(episode), judge=judge,  # type: ignore[arg-type]
                    settings=WorkerSettings())
    [req] = judge.asked
    assert req.checker_success is success and len(req.steps) == 1
