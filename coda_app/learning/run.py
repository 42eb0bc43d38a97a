"""``coda learn``: the closed loop, measured.

Everything runs for real: the master (its own Postgres and Redis), a worker with real desktops
(local Xvfb or desktop containers) running KAlgebra and the tasks' own setup and checkers, the
judge service, group jobs, the trainer's decoupled GRPO, versions published to the master and
pulled by the planner service, whose model (a tiny Qwen2.5-VL on transformers) writes every
plan. By default the only stand-in is the frozen executor's model: it answers from recorded
UI-TARS outputs keyed by the plan it is given (:mod:`coda_app.learning.recordings`); the judge
answers from recorded verdicts keyed by the whole trajectory. Both can be real models
(settings): with the general ones (``--executor ocr --judge rules``) no recording is written
or served, and the result's ``executor.backend`` and ``judge_backend`` say so.

The loop, in rounds::

    version v (first: the warm start, 'base')
    -> a batch pinned to v: every task x rollouts, fresh episodes; their checkers' verdicts are
       v's success rate (with its 95 % interval); the judge labels each trajectory and every
       step of a clean success becomes a group job (G plans from the planner at the stored state,
       grounded by the executor, rewarded against the labelled action)
    -> one GRPO update on the round's groups (only groups v sampled: staleness 0)
    -> version v+1 published, pulled by the planner service
    -> until ``updates`` updates, or a version at the target; the last version is measured too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from coda.clients.master import MasterClient
from coda.clients.planner import PlannerClient
from coda.contracts.master_api import BatchCreate, GroupLeaseRequest
from coda.contracts.records import Episode, JudgeMode
from coda.contracts.services_api import BASE_VERSION
from coda.logging import get_logger
from coda.scoring import rates_by, wilson_interval
from coda.tasks import TaskLoadError, TaskSpec, load_task_file
from coda_app.learning.curriculum import Curriculum, CurriculumError, load_curricula
from coda_app.learning.recordings import (
    executor_script,
    judge_script,
    plan_kind,
    planner_script,
)
from coda_app.learning.result import REWARDED, ExecutorCheck, LearnResult, Measured, Update
from coda_app.learning.settings import LearnSettings
from coda_app.learning.system import LocalSystem
from coda_app.learning.waiting import LoopTimeout, wait_batch
from coda_app.learning.warmup import (
    WarmStart,
    cache_key,
    cached,
    fine_tune_rows,
    record,
    write_script,
)

log = get_logger("coda_app.learning.run")

BATCH_TIMEOUT_S = 1800.0
PULL_TIMEOUT_S = 180.0


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def version_of(value: str | None) -> str:
    return value or BASE_VERSION


def mismatches(episodes: list[Episode], version: str) -> list[str]:
    """Episodes, and steps of their last attempt, recorded with another planner version than
    the one their batch pinned (pure): each must be empty for the curve to be by version."""
    out = []
    for ep in episodes:
        if version_of(ep.planner_version) != version:
            out.append(f"episode {ep.id}: {version_of(ep.planner_version)}")
        steps = ep.steps or []
        last = max((s.attempt or 1 for s in steps), default=1)
        for s in steps:
            if (s.attempt or 1) == last and s.thought is not None \
                    and version_of(s.planner_version) != version:
                out.append(f"episode {ep.id} step {s.index}: {version_of(s.planner_version)}")
    return out


def paths(episodes: list[Episode], curricula: list[Curriculum]) -> dict[str, dict[str, int]]:
    """Per task, how often each sequence of plan kinds was taken in the episodes' last attempts
    (pure)."""
    by_id = {c.spec.id: c for c in curricula if c.spec is not None}
    out: dict[str, dict[str, int]] = {}
    for ep in episodes:
        cur = by_id.get(ep.task_id)
        if cur is None:
            continue
        steps = ep.steps or []
        last = max((s.attempt or 1 for s in steps), default=1)
        kinds = [plan_kind(s.thought or "", cur, s.index) if s.thought else "no plan"
                 for s in sorted(steps, key=lambda s: s.index) if (s.attempt or 1) == last]
        key = " > ".join(kinds) + (" (solved)" if ep.success else "")
        counts = out.setdefault(cur.name, {})
        counts[key] = counts.get(key, 0) + 1
    return out


def timings(episodes: list[Episode]) -> tuple[float | None, dict[str, float]]:
    """The median episode (start to end) and the median of each part of a step (pure)."""
    spans = [(e.finished_at - e.started_at).total_seconds() for e in episodes
             if e.finished_at and e.started_at]
    parts: dict[str, list[float]] = {}
    for e in episodes:
        for step in e.steps or []:
            if step.timings is not None:
                for name, value in step.timings.model_dump().items():
                    parts.setdefault(name, []).append(value)
    return (round(statistics.median(spans), 2) if spans else None,
            {k: round(statistics.median(v), 1) for k, v in parts.items() if v})


def measured(episodes: list[Episode], version: str, *, round_: int, update: int,
             batch_id: uuid.UUID, seconds: float,
             curricula: list[Curriculum] | None = None) -> Measured:
    """A version's success over its fresh episodes (pure)."""
    solved = [(version, bool(e.success)) for e in episodes]
    rate = rates_by(solved)[0]
    low, high = wilson_interval(rate.succeeded, rate.rollouts)
    tasks: dict[str, list[int]] = {}
    for e in episodes:
        t = tasks.setdefault(e.task_id, [0, 0])
        t[0] += int(bool(e.success))
        t[1] += 1
    episode_s, step_ms = timings(episodes)
    return Measured(planner_version=version, rollouts=rate.rollouts, succeeded=rate.succeeded,
                    episode_s_median=episode_s, step_ms_median=step_ms,
                    rate=rate.rate, ci_low=round(low, 4), ci_high=round(high, 4), round=round_,
                    update=update, batch_id=str(batch_id), by_task=tasks,
                    episodes_s=round(seconds, 1), paths=paths(episodes, curricula or []),
                    version_mismatches=mismatches(episodes, version))


def transfer_task(s: LearnSettings, curricula: list[Curriculum]) -> TaskSpec:
    """The transfer task of ``s``, loaded: refused unless both the executor and the judge are
    general (a recording answers only the curricula's plans) and the task is none of the
    curricula's (its instruction is not theirs)."""
    assert s.transfer is not None
    if s.recorded_models:
        raise CurriculumError(f"the transfer task needs the general executor and judge (the "
                              f"{' and '.join(s.recorded_models)} replays the curricula's "
                              "recordings): run with --executor ocr --judge rules")
    try:
        spec = load_task_file(s.transfer)
    except (OSError, TaskLoadError) as exc:
        raise CurriculumError(f"transfer task {s.transfer}: {exc}") from exc
    same = [c.name for c in curricula if c.spec is not None
            and c.spec.instruction == spec.instruction]
    if same:
        raise CurriculumError(f"transfer task {s.transfer} is in the curricula ({same[0]})")
    return spec


def merge_rewarded(known: list[str], plan_rewards: dict[str, float]) -> list[str]:
    """``known`` with the plans of ``plan_rewards`` rewarded at least REWARDED, sorted and
    distinct (pure)."""
    return sorted(set(known) | {t for t, r in plan_rewards.items() if r >= REWARDED})


class ClosedLoop:
    """One run: ``await ClosedLoop(settings).run()``."""

    def __init__(self, s: LearnSettings) -> None:
        self.s = s
        self.curricula: list[Curriculum] = load_curricula(s.tasks)
        unrecorded = [c.name for c in self.curricula if not c.steps]
        needs = [what for what, used in (("the warm-up", s.warm_up),
                                         ("the recorded executor", s.executor is None),
                                         ("the recorded judge", s.judge is None)) if used]
        if unrecorded and needs:
            raise CurriculumError(f"{', '.join(unrecorded)}: no recorded plans, which "
                                  f"{' and '.join(needs)} need")
        gaps = [g for c in self.curricula
                for g in c.unrecorded(executor=s.executor is None, judge=s.judge is None)]
        if gaps:
            raise CurriculumError(
                f"the replayed {' and '.join(s.recorded_models)} has no recorded output "
                "(key and executor) for: "
                + "; ".join(gaps) + " (record them, or run with --executor ocr --judge rules)")
        self.transfer: TaskSpec | None = None
        """The task the last version is also measured on (settings.transfer)."""
        if s.transfer is not None:
            self.transfer = transfer_task(s, self.curricula)
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        self.name = s.run_name or f"learn-{stamp}"
        self.run_dir = s.run_dir(self.name)
        self.recordings = self.run_dir / "recordings"
        """The replay scripts of the recorded executor and judge (only those the run serves)."""
        self.record_planner = self.run_dir / "warm-up" / "planner-record.json"
        """The warm-up's recording planner: the curricula's right plans, turn by turn."""
        self.phases: dict[str, float] = {}

    # -- the model services ------------------------------------------------------------------

    def _common(self, system: LocalSystem) -> dict[str, Any]:
        return {"artifacts_url": str(system.artifacts),
                "inference_tokens": [system.service_token],
                "admin_token": system.service_admin_token, "log_level": "WARNING"}

    def _executor(self, system: LocalSystem) -> Any:
        from executor_service.settings import ExecutorSettings

        # unset fields (None) take the executor service's defaults (max_pixels: UI-TARS's)
        spec = {"backend": "replay", "model": str(self.recordings / "executor.json")} \
            if self.s.executor is None else self.s.executor.model_dump(exclude_none=True)
        return ExecutorSettings(**spec, **self._common(system))

    def _judge(self, system: LocalSystem) -> Any:
        from judge_service.settings import JudgeModelSpec, JudgeSettings

        spec = self.s.judge.model_dump() if self.s.judge is not None else {
            "name": "judge", "backend": "replay", "model": str(self.recordings / "judge.json")}
        return JudgeSettings(models=[JudgeModelSpec(**spec)], **self._common(system))

    def _planner(self, system: LocalSystem, model: str, backend: str = "transformers") -> Any:
        from planner_service.settings import PlannerSettings

        pull: dict[str, Any] = {}
        if backend != "replay":
            pull = {"master_url": system.master_url, "master_token": system.worker_token,
                    "version_poll_s": 1.0, "keep_versions": 3}
        return PlannerSettings(backend=backend, model=model, device=self.s.device,
                               max_pixels=self.s.max_pixels,
                               adapter_cache_dir=str(self.run_dir / "adapter-cache"),
                               **pull, **self._common(system))

    def _torch_env(self) -> dict[str, str]:
        n = self.s.torch_threads
        return {} if n is None else {"OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n)}

    def _worker_extra(self) -> dict[str, str]:
        s = self.s
        return {"CODA_WORKER_PROVIDER": s.provider,
                "CODA_WORKER_PROVIDER_OPTIONS": json.dumps(s.provider_options),
                "CODA_WORKER_TEMPERATURE": str(s.temperature),
                "CODA_WORKER_GROUP_TEMPERATURE": str(s.temperature),
                "CODA_WORKER_MAX_TOKENS": str(s.max_tokens),
                "CODA_WORKER_MAX_STEPS": str(s.max_steps),
                "CODA_WORKER_JUDGE_POLICY": s.judge_policy.model_dump_json()}

    # -- the run -----------------------------------------------------------------------------

    async def run(self) -> LearnResult:
        started = time.monotonic()
        if self.s.torch_threads is not None:
            import torch

            torch.set_num_threads(self.s.torch_threads)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        files: dict[str, str] = {}
        if self.s.executor is None:
            executor_file = write_script(executor_script(self.curricula),
                                         self.recordings / "executor.json")
            files[str(executor_file)] = sha256(executor_file)
        if self.s.judge is None:
            write_script(judge_script(self.curricula), self.recordings / "judge.json")
        log.info("learn.start", run=self.name, dir=str(self.run_dir),
                 tasks=[c.name for c in self.curricula], control=self.s.reward_control.value,
                 recorded=self.s.recorded_models)
        with LocalSystem(self.run_dir) as system:
            async with MasterClient(system.master_url,
                                    token=system.admin_token.get_secret_value()) as master:
                system.start_services({"executor": self._executor(system),
                                       "judge": self._judge(system)}, phase="run")
                ready_start = await self._ready(system, "executor")
                warm = await self._warm_start(system, master)
                result = LearnResult(
                    run=self.name, reward_control=self.s.reward_control.value,
                    target=self.s.target, tasks=[c.name for c in self.curricula],
                    settings=self.s.model_dump(mode="json"), warm_start=warm.info,
                    executor=ExecutorCheck(backend=self._executor(system).backend,
                                           files=files, files_at_end={},
                                           ready_at_start=ready_start, ready_at_end={}),
                    judge_backend=self._judge(system).models[0].backend)
                await self._learn(system, master, warm, result)
                result.executor.files_at_end = {f: sha256(Path(f)) for f in files}
                result.executor.ready_at_end = await self._ready(system, "executor")
        result.seconds = round(time.monotonic() - started, 1)
        result.phases_s = self.phases
        self._write(result)
        return result

    async def _ready(self, system: LocalSystem, role: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=30) as http:
            body = (await http.get(f"{system.url(role)}/readyz")).json()
        return body if isinstance(body, dict) else {"readyz": body}

    async def _warm_start(self, system: LocalSystem, master: MasterClient) -> WarmStart:
        started = time.monotonic()
        if not self.s.warm_up:
            model = self.s.planner_model or ""
            if not model:
                raise ValueError("warm_up off needs planner_model (the planner to start from)")
            return WarmStart(Path(model), {"model": model, "warm_up": False})
        home = self.s.home.resolve()
        found = cached(home, cache_key(self.curricula, self.s))
        if found is not None:
            log.info("learn.warm_start_cached", model=str(found.model_dir))
            return WarmStart(found.model_dir, {**found.info, "cached": True})
        write_script(planner_script(self.curricula), self.record_planner)
        system.start_services({"planner": self._planner(
            system, str(self.record_planner), backend="replay")}, phase="record")
        system.start_worker(slots=self.s.slots, job_slots=self.s.job_slots, phase="record",
                            extra=self._worker_extra())
        try:
            rows, batch = await record(master, self.curricula, self.run_dir / "warm-dataset",
                                       timeout_s=BATCH_TIMEOUT_S, alive=system.worker_alive)
        finally:  # the desktops and the recording planner are not needed while fine-tuning
            system.stop_worker()
            system.stop_service("planner")
        self.phases["record"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        warm = await asyncio.to_thread(fine_tune_rows, rows, batch, self.curricula, self.s)
        self.phases["warm_start"] = round(time.monotonic() - started, 1)
        return warm

    async def _learn(self, system: LocalSystem, master: MasterClient, warm: WarmStart,
                     result: LearnResult) -> None:
        from trainer.grpo.loop import Trainer

        system.start_services({"planner": self._planner(system, str(warm.model_dir))},
                              phase="learn", env=self._torch_env())
        system.start_worker(slots=self.s.slots, job_slots=self.s.job_slots, phase="learn",
                            extra=self._worker_extra())
        trainer = Trainer(self._trainer_config(system, warm))
        started = time.monotonic()
        version, idle, round_ = BASE_VERSION, 0, 0
        try:
            while True:
                m = await self._measure(system, master, version, round_, len(result.updates))
                result.curve.append(m)
                round_ += 1
                if result.reached is None and (m.rate or 0.0) >= self.s.target:
                    result.reached = m
                rise = (m.rate or 0.0) - (result.curve[0].rate or 0.0)
                done = len(result.updates) >= self.s.updates or (
                    self.s.stop_at_target and result.reached is not None) or (
                    self.s.stop_at_rise is not None and rise >= self.s.stop_at_rise)
                if done:
                    break
                update = await self._update(system, trainer, result)
                if update is None:
                    idle += 1
                    if idle >= self.s.max_idle_rounds:
                        log.warning("learn.no_updates", rounds=idle)
                        break
                    continue
                idle = 0
                result.updates.append(update)
                version = update.published or version
                self._write(result)
            await self._last_groups(master, result)
            if self.transfer is not None:
                result.transfer = await self._measure(
                    system, master, version, round_, len(result.updates),
                    tasks=[self.transfer], rollouts=self.s.transfer_rollouts, label="transfer")
                self.phases["transfer"] = result.transfer.episodes_s
        finally:
            await trainer.aclose()
            self.phases["learn"] = round(time.monotonic() - started, 1)

    def _trainer_config(self, system: LocalSystem, warm: WarmStart) -> Any:
        from trainer.config import TrainerConfig

        s = self.s
        return TrainerConfig(
            master_url=system.master_url, master_token=system.admin_token,
            model=str(warm.model_dir), artifacts_url=f"file://{system.artifacts}",
            checkpoint_dir=str(self.run_dir / "trainer"), planner_urls=[],
            run_name=self.name, lora=True, lora_rank=s.lora_rank, lora_alpha=s.lora_alpha,
            lora_targets=s.lora_targets, learning_rate=s.learning_rate, device=s.device,
            max_pixels=s.max_pixels, groups_per_update=s.groups_per_update, publish_every=1,
            max_staleness=0, temperature=s.temperature, seed=s.seed,
            reward_control=s.reward_control, poll_s=0.5)

    async def _measure(self, system: LocalSystem, master: MasterClient, version: str,
                       round_: int, updates: int, *, tasks: list[TaskSpec] | None = None,
                       rollouts: int | None = None, label: str = "") -> Measured:
        """``version`` on fresh episodes of the curricula's tasks (judged; their clean
        successes make group jobs), or of ``tasks`` (``label`` names the batch; no judge, no
        groups: measured only)."""
        started = time.monotonic()
        learn = tasks is None
        specs = [c.spec for c in self.curricula if c.spec] if tasks is None else tasks
        created = await master.create_batch(BatchCreate(
            name=f"{self.name}-r{round_:02d}-{version}" + (f"-{label}" if label else ""),
            tasks=[t.model_dump(mode="json") for t in specs],
            rollouts=rollouts or self.s.rollouts,
            judge=JudgeMode.ALWAYS if learn else JudgeMode.NEVER,
            group_size=self.s.group_size if learn else 0,
            planner_version=None if version == BASE_VERSION else version))
        episodes = await wait_batch(master, created.batch.id, created.episode_ids,
                                    timeout_s=BATCH_TIMEOUT_S,
                                    what=f"round {round_} ({version}) {label}".strip(),
                                    alive=system.worker_alive)
        m = measured(episodes, version, round_=round_, update=updates,
                     batch_id=created.batch.id, seconds=time.monotonic() - started,
                     curricula=self.curricula)
        log.info("learn.measured", round=round_, version=version, label=label, rate=m.rate,
                 ci=[m.ci_low, m.ci_high], rollouts=m.rollouts, by_task=m.by_task,
                 seconds=m.episodes_s, mismatches=len(m.version_mismatches))
        return m

    async def _update(self, system: LocalSystem, trainer: Any, result: LearnResult
                      ) -> Update | None:
        """One GRPO update on the ready groups and its version live at the planner; None when
        no group had anything to learn from. The leased groups' rewarded plans go to
        ``result.rewarded_plans`` either way."""
        started = time.monotonic()
        report = await trainer.run_once()
        result.rewarded_plans = merge_rewarded(result.rewarded_plans, report.plan_rewards)
        if report.update is None:
            log.info("learn.no_trainable_groups", leased=report.leased, dropped=report.dropped)
            return None
        if report.published:
            await self._pulled(system, report.published)
        update = Update(update=report.update, policy_version=report.policy_version or "",
                        published=report.published, groups=report.trained,
                        group_versions=report.group_versions, dropped=report.dropped,
                        metrics={k: round(v, 5) for k, v in report.metrics.items()},
                        seconds=round(time.monotonic() - started, 1))
        log.info("learn.updated", update=update.update, trained_on=update.policy_version,
                 published=update.published, groups=update.groups,
                 reward_mean=update.metrics.get("reward_mean"), seconds=update.seconds)
        return update

    async def _last_groups(self, master: MasterClient, result: LearnResult) -> None:
        """The rewarded plans of the groups no update leased (the last version's: measured,
        never trained on) into ``result.rewarded_plans``: leased to be read, never acked."""
        from trainer.grpo.loop import plan_rewards

        left = await master.lease_groups(GroupLeaseRequest(max_groups=1024, ttl_s=60))
        result.rewarded_plans = merge_rewarded(result.rewarded_plans, plan_rewards(left.items))

    async def _pulled(self, system: LocalSystem, version: str) -> None:
        """Until the planner service serves ``version`` by default (it pulls from the master)."""
        deadline = time.monotonic() + PULL_TIMEOUT_S
        async with PlannerClient(system.url("planner"),
                                 token=system.service_token.get_secret_value()) as planner:
            while True:
                adapters = (await planner.list_adapters()).items
                if any(a.version == version and a.is_default for a in adapters):
                    return
                if time.monotonic() > deadline:
                    raise LoopTimeout(f"the planner service did not pull {version} in "
                                      f"{PULL_TIMEOUT_S:.0f} s (it serves "
                                      f"{[a.version for a in adapters]})")
                await asyncio.sleep(0.5)

    def _write(self, result: LearnResult) -> None:
        text = result.model_dump_json(indent=1) + "\n"
        (self.run_dir / "result.json").write_text(text)
        if self.s.out is not None:
            Path(self.s.out).parent.mkdir(parents=True, exist_ok=True)
            Path(self.s.out).write_text(text)
