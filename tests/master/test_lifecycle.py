"""Episode -> judge job -> verdict, labelled steps, group jobs -> groups: the rules (pure, table
driven) and the whole chain through a real master over HTTP, including what a retry or a
repeated verdict must not create twice."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.jobs import (
    EpisodeResult,
    GroupJob,
    GroupJobResult,
    Job,
    JudgeJob,
    JudgeJobResult,
)
from coda.contracts.master_api import GroupJobCreate
from coda.contracts.records import JobKind, JudgeMode, ScreenSize, Step, StepLabel, Worker
from coda.contracts.training import (
    Candidate,
    Group,
    GroupStatus,
    LabelRule,
    ModelVersionCreate,
    StateRef,
    Verdict,
)
from coda.labels import label_verdict
from master.lifecycle import group_fate, judge_job_id, needs_judge, version_window
from tests.master.conftest import submit

KEY = "sha256/ab/" + "a" * 64 + ".png"
SCREEN = ScreenSize(width=1280, height=720)


@pytest.mark.parametrize(("mode", "success", "want"), [
    (JudgeMode.ALWAYS, True, True), (JudgeMode.ALWAYS, None, True),
    (JudgeMode.NO_CHECKER, None, True), (JudgeMode.NO_CHECKER, False, False),
    (JudgeMode.NO_CHECKER, True, False), (JudgeMode.NEVER, None, False)])
def test_needs_judge(mode: JudgeMode, success: bool | None, want: bool) -> None:
    assert needs_judge(mode, success) is want


@pytest.mark.parametrize(("newest", "size", "want"), [
    ([], 2, {"base"}), (["v1"], 2, {"v1", "base"}), (["v2", "v1"], 2, {"v2", "v1"}),
    (["v3", "v2", "v1"], 1, {"v3"}), (["v1"], 0, {"v1"})])
def test_version_window(newest: list[str], size: int, want: set[str]) -> None:
    assert version_window(newest, size) == want


@pytest.mark.parametrize(("version", "rewards", "want"), [
    ("v2", [0.0, 1.0], (GroupStatus.READY, None)),
    (None, [0.0, 0.5], (GroupStatus.DROPPED, "stale")),
    ("v0", [0.0, 1.0], (GroupStatus.DROPPED, "stale")),
    ("v1", [0.5, 0.5, 0.5], (GroupStatus.DROPPED, "equal_rewards")),
    ("v1", [], (GroupStatus.DROPPED, "equal_rewards"))])
def test_group_fate(version: str | None, rewards: list[float],
                    want: tuple[GroupStatus, str | None]) -> None:
    assert group_fate(version, rewards, {"v2", "v1"}) == want


@pytest.mark.parametrize(("verdict", "rule", "want"), [
    (Verdict(correct=True), LabelRule.CLEAN_ONLY, [0, 1, 2]),
    (Verdict(correct=True, redundant=[2]), LabelRule.CLEAN_ONLY, []),
    (Verdict(correct=False, first_error_step=3), LabelRule.CLEAN_ONLY, []),
    (Verdict(correct=False, first_error_step=3), LabelRule.BEFORE_FIRST_ERROR, [0, 1]),
    (Verdict(correct=False), LabelRule.BEFORE_FIRST_ERROR, [])])
def test_label_verdict(verdict: Verdict, rule: LabelRule, want: list[int]) -> None:
    assert label_verdict(verdict, 3, rule) == want


# ------------------------------------------------------------------------- through the master


async def _run_episode(admin: MasterClient, wclient: MasterClient, worker: Worker, *,
                       success: bool | None, actions: int = 2, **batch: Any) -> uuid.UUID:
    """Submit one task, run its episode by hand: ``actions`` steps with an action and one
    without, then complete it with ``success``."""
    created = await submit(admin, 1, **batch)
    [job] = await wclient.lease(worker.id, JobKind.EPISODE)
    for i in range(actions):
        await wclient.report_step(job, Step(index=i, thought=f"Thought: {i}", screenshot=KEY,
                                            screen=SCREEN,
                                            action={"type": "hotkey", "keys": ["ctrl", "s"]}))
    await wclient.report_step(job, Step(index=actions, thought="garbage", screenshot=KEY,
                                        screen=SCREEN, outcome="parse_error",
                                        error="no action"))
    await wclient.complete(job, EpisodeResult(success=success, steps=actions + 1))
    return created.episode_ids[0]  # type: ignore[no-any-return]


async def _lease_all(wclient: MasterClient, worker: Worker, kind: JobKind) -> list[Job]:
    return await wclient.lease(worker.id, kind, capacity=50)


def _group(episode: uuid.UUID, step: int, rewards: list[float],
           version: str | None) -> GroupJobResult:
    state = StateRef(episode_id=episode, step_index=step, instruction="plot", app="KAlgebra",
                     screenshot=KEY, screen_width=1280, screen_height=800)
    group = Group(state=state, target={"type": "hotkey", "keys": ["ctrl", "s"]},
                  candidates=[Candidate(plan=f"Thought: {r}", reward=r, planner_version=version)
                              for r in rewards], planner_version=version)
    return GroupJobResult(group=group)


async def test_episode_judge_groups_chain(admin: MasterClient, wclient: MasterClient,
                                          worker: Worker) -> None:
    episode = await _run_episode(admin, wclient, worker, success=True, group_size=3)
    [judge] = await _lease_all(wclient, worker, JobKind.JUDGE)
    assert judge.id == judge_job_id(episode)
    assert isinstance(judge, JudgeJob) and judge.payload.episode_id == episode
    with pytest.raises(ServiceError) as err:  # a result that is no verdict: 422, no change
        await wclient.send("POST", f"/v1/jobs/{judge.id}/complete", {
            "lease_token": judge.lease_token, "kind": "judge",
            "result": {"verdict": {"correct": "maybe"}}})
    assert err.value.status == 422
    assert err.value.detail[0]["loc"][:5] == ["body", "judge", "result", "verdict", "correct"]
    await wclient.complete(judge, JudgeJobResult(verdict=Verdict(correct=True)))

    ep = await admin.get_episode(episode)
    assert ep.verdict is not None and ep.verdict.positive_steps == [0, 1, 2]
    assert [s.label for s in ep.steps or []] == [StepLabel.POSITIVE] * 3
    assert all(s.screen == SCREEN for s in ep.steps or [])
    groups = await _lease_all(wclient, worker, JobKind.GROUP)
    assert all(isinstance(g, GroupJob) for g in groups)
    payloads = sorted((g.payload for g in groups if isinstance(g, GroupJob)),
                      key=lambda p: p.step_index)
    # the step without an action gets no group job
    assert [(p.step_index, p.group_size, p.attempt, p.planner_version) for p in payloads] == [
        (0, 3, 1, None), (1, 3, 1, None)]
    by_step = {g.payload.step_index: g for g in groups if isinstance(g, GroupJob)}
    await wclient.complete(by_step[0], _group(episode, 0, [0.0, 1.0, 0.5], None))
    await wclient.complete(by_step[1], _group(episode, 1, [1.0, 1.0, 1.0], None))
    status = await admin.status()
    assert status.groups == {"ready": 1, "dropped": 1}
    assert status.groups_dropped == {"equal_rewards": 1}
    assert status.verdicts == {"judged": 1, "correct": 1}

    # the same verdict again (the admin route, as a re-judged episode would): nothing new
    for _ in range(2):
        await admin.set_verdict(episode, Verdict(correct=True))
    assert await _lease_all(wclient, worker, JobKind.GROUP) == []
    assert (await admin.status()).groups == {"ready": 1, "dropped": 1}


async def test_judge_modes(admin: MasterClient, wclient: MasterClient, worker: Worker) -> None:
    cases = [(JudgeMode.ALWAYS, False, 1), (JudgeMode.NO_CHECKER, True, 0),
             (JudgeMode.NO_CHECKER, None, 1), (JudgeMode.NEVER, None, 0)]
    for mode, success, want in cases:
        await _run_episode(admin, wclient, worker, success=success, judge=mode.value)
        got = await _lease_all(wclient, worker, JobKind.JUDGE)
        assert len(got) == want, (mode, success)
        for job in got:
            await wclient.fail(job, "not judged here", retry=False)


async def test_a_retried_judge_job_creates_nothing_twice(
        admin: MasterClient, wclient: MasterClient, worker: Worker) -> None:
    episode = await _run_episode(admin, wclient, worker, success=None, actions=1)
    [judge] = await _lease_all(wclient, worker, JobKind.JUDGE)
    # the worker reports a failure after the verdict was stored by hand (a lost answer)
    await admin.set_verdict(episode, Verdict(correct=True))
    await wclient.fail(judge, "lost the answer", retry=True)
    [again] = await _lease_all(wclient, worker, JobKind.JUDGE)
    assert again.id == judge.id and again.attempt == 2
    await wclient.complete(again, JudgeJobResult(verdict=Verdict(correct=True)))
    assert len(await _lease_all(wclient, worker, JobKind.GROUP)) == 1  # one, not two


async def test_groups_of_an_old_planner_version_are_dropped_as_stale(
        admin: MasterClient, wclient: MasterClient, worker: Worker) -> None:
    for name in ("v1", "v2"):
        await admin.register_version(ModelVersionCreate(name=name, base_model="tiny"))
    episode = await _run_episode(admin, wclient, worker, success=True, actions=2)
    [judge] = await _lease_all(wclient, worker, JobKind.JUDGE)
    await wclient.complete(judge, JudgeJobResult(verdict=Verdict(correct=True)))
    jobs = await _lease_all(wclient, worker, JobKind.GROUP)
    assert {j.payload.planner_version for j in jobs if isinstance(j, GroupJob)} == {"v2"}
    for name in ("v3", "v4"):  # the trainer moved on twice while the groups were sampled
        await admin.register_version(ModelVersionCreate(name=name, base_model="tiny"))
    by_step = {j.payload.step_index: j for j in jobs if isinstance(j, GroupJob)}
    await wclient.complete(by_step[0], _group(episode, 0, [0.0, 1.0], "v2"))
    await wclient.complete(by_step[1], _group(episode, 1, [0.0, 1.0], "v4"))
    status = await admin.status()
    assert status.groups_dropped == {"stale": 1} and status.groups.get("ready") == 1


async def test_a_second_group_job_for_the_same_step_stores_no_second_group(
        admin: MasterClient, wclient: MasterClient, worker: Worker) -> None:
    episode = await _run_episode(admin, wclient, worker, success=True, actions=1)
    [judge] = await _lease_all(wclient, worker, JobKind.JUDGE)
    await wclient.complete(judge, JudgeJobResult(verdict=Verdict(correct=True)))
    [job] = await _lease_all(wclient, worker, JobKind.GROUP)
    await wclient.complete(job, _group(episode, 0, [0.0, 1.0], None))
    # the same step's group job made again by hand (a retry from outside): no second group
    assert isinstance(job, GroupJob)
    await admin.create_job(GroupJobCreate(kind=JobKind.GROUP, payload=job.payload))
    [again] = await _lease_all(wclient, worker, JobKind.GROUP)
    await wclient.complete(again, _group(episode, 0, [0.0, 0.5], None))
    assert (await admin.status()).groups == {"ready": 1}
