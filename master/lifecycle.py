"""What follows a finished job: episode -> judge job -> verdict, labelled steps and group jobs
-> stored groups.

Every follow-up is created in the transaction that finishes the job before it, with an id
derived from what it is about (a judge job per episode, a group job per judged step), inserted
``on conflict do nothing``: a retried or repeated completion creates nothing twice. Groups
remember their source step the same way. The rules themselves are pure functions here.
"""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from coda.contracts.jobs import GroupJobPayload, JudgeJobPayload
from coda.contracts.records import BatchOptions, JobKind, JudgeMode
from coda.contracts.services_api import BASE_VERSION
from coda.contracts.training import Group, GroupStatus, Verdict
from coda.labels import label_verdict
from coda.logging import get_logger
from master.errors import EpisodeNotFound
from master.repos import batches as batch_rows
from master.repos import episodes as episode_rows
from master.repos import groups as group_rows
from master.repos import jobs as job_rows
from master.repos import steps as step_rows
from master.repos import versions as version_rows
from master.repos.jobs import NewJob

log = get_logger("coda.master.lifecycle")

NAMESPACE = uuid.UUID("0c0da5e1-7a1f-4d6b-9b0e-5c1e0f6a2b3c")
EQUAL_REWARDS = 1e-9

def judge_job_id(episode_id: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, f"judge:{episode_id}")


def group_source(episode_id: uuid.UUID, attempt: int, step_index: int) -> str:
    return f"{episode_id}:{attempt}:{step_index}"


def group_job_id(episode_id: uuid.UUID, attempt: int, step_index: int) -> uuid.UUID:
    return uuid.uuid5(NAMESPACE, "group:" + group_source(episode_id, attempt, step_index))


def needs_judge(mode: JudgeMode, success: bool | None) -> bool:
    """Whether a completed episode gets a judge job under the batch's ``mode`` (pure)."""
    return mode is JudgeMode.ALWAYS or (mode is JudgeMode.NO_CHECKER and success is None)


def version_window(newest_first: list[str], size: int) -> set[str]:
    """The planner versions a group may come from: the ``size`` newest, the base model
    counting as the oldest version (pure)."""
    return set([*newest_first, BASE_VERSION][:max(1, size)])


def group_fate(version: str | None, rewards: list[float],
               window: set[str]) -> tuple[GroupStatus, str | None]:
    """Ready, or dropped with its reason: ``stale`` (sampled by a version outside the window),
    ``equal_rewards`` (no advantage to learn from) (pure)."""
    if (version or BASE_VERSION) not in window:
        return GroupStatus.DROPPED, "stale"
    if not rewards or max(rewards) - min(rewards) < EQUAL_REWARDS:
        return GroupStatus.DROPPED, "equal_rewards"
    return GroupStatus.READY, None


def _options(raw: Any) -> BatchOptions:
    return BatchOptions.model_validate(raw or {})


async def after_episode(conn: asyncpg.Connection, job_id: uuid.UUID) -> list[uuid.UUID]:
    """The judge job of the episode this job completed, when its batch wants one."""
    row = await batch_rows.options_of_episode(conn, "job_id", job_id)
    if row is None:
        return []
    opts = _options(row["options"])
    if not needs_judge(opts.judge, row["success"]):
        return []
    jid = judge_job_id(row["id"])
    payload = JudgeJobPayload(episode_id=row["id"], label_rule=opts.label_rule)
    created = await job_rows.insert_once(conn, NewJob(
        id=jid, kind=JobKind.JUDGE, payload=payload.model_dump(mode="json"),
        priority=row["priority"], batch_id=row["batch_id"]))
    return [jid] if created else []


async def apply_verdict(conn: asyncpg.Connection, episode_id: uuid.UUID,
                        verdict: Verdict) -> tuple[Verdict, list[uuid.UUID]]:
    """Store the verdict, label the steps of the episode's last attempt and create a group
    job for each positive step that has an action. Returns the stored verdict (with its
    positive steps) and the new jobs."""
    row = await batch_rows.options_of_episode(conn, "id", episode_id, lock=True)
    if row is None:
        raise EpisodeNotFound(f"episode {episode_id} not found")
    opts = _options(row["options"])
    steps = await step_rows.of_last_attempt(conn, episode_id)
    positive = label_verdict(verdict, len(steps), opts.label_rule)
    stored = verdict.model_copy(update={"positive_steps": positive})
    await episode_rows.set_verdict(conn, episode_id, stored)
    if not steps:
        return stored, []
    attempt = steps[0]["attempt"]
    await step_rows.label(conn, episode_id, attempt, [steps[i]["idx"] for i in positive])
    if opts.group_size == 0:
        return stored, []
    version = await version_rows.current_name(conn)
    created = []
    for i in positive:
        step = steps[i]
        if (step["body"] or {}).get("action") is None:
            continue
        payload = GroupJobPayload(episode_id=episode_id, attempt=attempt,
                                  step_index=step["idx"], group_size=opts.group_size,
                                  planner_version=version)
        jid = group_job_id(episode_id, attempt, step["idx"])
        if await job_rows.insert_once(conn, NewJob(
                id=jid, kind=JobKind.GROUP, payload=payload.model_dump(mode="json"),
                priority=row["priority"], batch_id=row["batch_id"])):
            created.append(jid)
    log.info("verdict.applied", episode=str(episode_id), correct=verdict.correct,
             positive=len(positive), group_jobs=len(created))
    return stored, created


async def store_group(conn: asyncpg.Connection, group: Group, *, source: str | None,
                      window_size: int) -> tuple[GroupStatus, str | None] | None:
    """Store a group a group job made: ready, or dropped as stale / equal rewards (kept, so
    the counts show). None when its source step already has a group. A group without a
    source step (``POST /v1/groups``) is stored ready."""
    status, reason = GroupStatus.READY, None
    if source is not None:
        newest = await version_rows.newest_names(conn, max(1, window_size))
        status, reason = group_fate(group.planner_version,
                                    [c.reward for c in group.candidates],
                                    version_window(newest, window_size))
    got = await group_rows.insert(conn, group, status=status, reason=reason, source=source)
    return (status, reason) if got is not None else None
