"""The jobs that turn a finished episode into training data, run without a desktop:

- a **judge** job sends the stored screenshots and steps of the episode's last attempt to the
  judge service and returns its verdict (the master stores it, labels the steps and makes the
  group jobs);
- a **group** job rebuilds the planner input of one positive step from the stored screenshots
  and history (the episode loop's own history rule), samples G plans in one planner call,
  grounds them in one executor batch call and scores each against the labelled action with
  the reward of :mod:`coda.rewards`.
"""

from __future__ import annotations

from coda.actions import Action
from coda.clients.executor import ExecutorClient
from coda.clients.judge import JudgeClient
from coda.clients.master import MasterClient
from coda.clients.planner import PlannerClient
from coda.contracts.jobs import GroupJob, GroupJobResult, JudgeJob, JudgeJobResult
from coda.contracts.records import Episode, Step
from coda.contracts.services_api import (
    ActBatchRequest,
    HistoryStep,
    ImageRef,
    JudgeRequest,
    JudgeStep,
    PlanRequest,
    Sampling,
    stored_version,
)
from coda.contracts.training import Candidate, Group, StateRef
from coda.logging import get_logger
from coda.plans import PlanDecision, decide
from coda.rewards import action_reward
from worker.episode import executor_sampling
from worker.history import attempt_steps, clip, history_of
from worker.settings import WorkerSettings

log = get_logger("worker.followups")

class JobRefused(ValueError):
    """The job cannot be done from what the master stores (retrying will not help)."""


def judge_steps(steps: list[Step]) -> list[JudgeStep]:
    """The judge's view of recorded steps (pure): each screenshot with its thought and the
    executor's action text (or the typed action when the executor wrote none)."""
    out = []
    for s in steps:
        if not s.screenshot:
            continue
        action = s.raw_executor_text or (s.action.model_dump_json() if s.action else None)
        out.append(JudgeStep(screenshot=ImageRef(ref=s.screenshot),
                             thought=clip(s.thought) if s.thought else None,
                             action=clip(action) if action else None))
    return out


async def run_judge(job: JudgeJob, *, master: MasterClient, judge: JudgeClient,
                    settings: WorkerSettings) -> JudgeJobResult:
    payload = job.payload
    episode = await master.get_episode(payload.episode_id, steps=True)
    steps = judge_steps(attempt_steps(episode.steps or []))
    if not steps:
        raise JobRefused(f"episode {episode.id} has no recorded step with a screenshot")
    policy = settings.judge_policy.model_copy(update={"label_rule": payload.label_rule})
    resp = await judge.judge_request(JudgeRequest(
        instruction=clip(_instruction(episode)), steps=steps[-1024:], policy=policy,
        checker_success=episode.success))
    log.info("judge.done", job=str(job.id), episode=str(episode.id),
             correct=resp.verdict.correct, positive=len(resp.verdict.positive_steps))
    return JudgeJobResult(verdict=resp.verdict)


def _instruction(episode: Episode) -> str:
    if not episode.instruction:
        raise JobRefused(f"episode {episode.id}: the master returned no instruction")
    return episode.instruction


def state_of(episode: Episode, steps: list[Step], index: int,
             ) -> tuple[StateRef, Step, list[HistoryStep]]:
    """The stored state before step ``index`` of ``steps`` (one attempt's steps), the step, and
    the history the planner saw before it (pure)."""
    by_index = {s.index: s for s in steps}
    step = by_index.get(index)
    if step is None or not step.screenshot:
        raise JobRefused(f"episode {episode.id} has no step {index} with a screenshot")
    before = [s for s in steps if s.index < index]
    if step.screen is None:
        raise JobRefused(f"step {index} of episode {episode.id} has no screen size")
    history = history_of(before)
    prev = before[-1].screenshot if before else None
    state = StateRef(
        episode_id=episode.id, step_index=index, instruction=_instruction(episode),
        app=episode.app, screenshot=step.screenshot, previous_screenshot=prev,
        history=history,
        screen_width=step.screen.width, screen_height=step.screen.height)
    return state, step, history


async def run_group(job: GroupJob, *, master: MasterClient, planner: PlannerClient,
                    executor: ExecutorClient, settings: WorkerSettings) -> GroupJobResult:
    payload = job.payload
    episode = await master.get_episode(payload.episode_id, steps=True)
    steps = attempt_steps(episode.steps or [], payload.attempt)
    state, step, history = state_of(episode, steps, payload.step_index)
    if step.action is None:
        raise JobRefused(f"step {payload.step_index} of episode {episode.id} has no action")
    if step.plan is None:
        raise JobRefused(f"step {payload.step_index} of episode {episode.id} has no plan record")
    target = step.action
    shot = ImageRef(ref=state.screenshot)
    resp = await planner.plan(PlanRequest(
        instruction=clip(state.instruction), screenshot=shot, history=history,
        n=payload.group_size,
        # top_p=1: the plans come from the full distribution their log-probs (and the
        # trainer's) describe; the services apply no top-k (GRPO's ratio assumes both)
        sampling=Sampling(temperature=settings.group_temperature, top_p=1.0,
                          max_tokens=settings.max_tokens),
        answer_mode=step.plan.answer_mode,
        adapter=payload.planner_version, return_logprobs=True))
    plans = resp.plans
    asked = payload.planner_version
    wrong = sorted({p.version for p in plans if asked is not None
                    and stored_version(p.version) != stored_version(asked)})
    if wrong:  # a group is trained as the version it names: it must be that version's
        raise JobRefused(f"the planner answered a group of version {asked} with {wrong}")
    decisions = [decide(p) for p in plans]
    actions = await grounded_actions(executor, settings, state, shot, history,
                                     [clip(p.text) for p in plans], decisions)
    screen = (state.screen_width, state.screen_height)
    candidates = []
    for plan, (action, raw) in zip(plans, actions, strict=True):
        candidates.append(Candidate(
            plan=plan.text, action=action, raw_action=raw,
            reward=action_reward(action, target, screen),
            planner_version=stored_version(plan.version),
            token_count=len(plan.token_ids) if plan.token_ids is not None
            else plan.completion_tokens,
            token_ids=plan.token_ids, logprobs=plan.logprobs))
    group = Group(state=state, target=target, candidates=candidates,
                  planner_version=payload.planner_version)
    rewards = [c.reward for c in candidates]
    log.info("group.done", job=str(job.id), episode=str(episode.id), step=payload.step_index,
             size=len(candidates), reward_mean=round(sum(rewards) / len(rewards), 4),
             reward_max=max(rewards))
    return GroupJobResult(group=group)


async def grounded_actions(executor: ExecutorClient, settings: WorkerSettings, state: StateRef,
                           shot: ImageRef, history: list[HistoryStep], texts: list[str],
                           decisions: list[PlanDecision],
                           ) -> list[tuple[Action | None, str | None]]:
    """Each plan's action and the executor's raw text, by the rollout's rule
    (:func:`coda.plans.decide`): the planner's own terminal action (DONE, an answer, FAIL), the
    executor's grounding of the plans that need one (one batch call), or none for an empty
    plan (reward 0)."""
    ground = [i for i, d in enumerate(decisions) if d.ground]
    out: list[tuple[Action | None, str | None]] = [(d.action, None) for d in decisions]
    if not ground:
        return out
    grounded = await executor.act_batch(ActBatchRequest(
        instruction=clip(state.instruction), thoughts=[texts[i] for i in ground],
        screenshot=shot, history=history, screen_width=state.screen_width,
        screen_height=state.screen_height, sampling=executor_sampling(settings)))
    for i, result in zip(ground, grounded.results, strict=True):
        out[i] = (result.action, result.raw)
    return out
