"""The trainer loop: lease groups, select, encode, update, checkpoint, ack, report, publish.

One update::

    lease <= groups_per_update groups (rank 0; broadcast to the other processes)
    -> ack at once, untrained: groups already in the checkpoint's ledger (consumed), groups
       sampled by a version outside the staleness window, all-equal rewards, unreadable data
       (dropped, counted by reason)
    -> GRPO step on the rest (trainer.grpo.update); under the ``zero`` control only its
       figures, no step: the weights never change and every version is the starting policy
    -> checkpoint (weights, optimizer, ledger with the pending acks) -> ack them consumed
    -> figures to the master (and TensorBoard) -> every K updates a new version goes live

Staleness is measured in versions: a group sampled by ``versions[i]`` is ``len(versions) - 1 -
i`` versions behind the policy the planners serve; more than ``max_staleness`` is dropped.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import torch

from coda.clients.base import ServiceError
from coda.clients.master import MasterClient
from coda.contracts.master_api import GroupLeaseRequest
from coda.contracts.training import GroupRecord, GroupStatus, TrainingMetricsReport
from coda.logging import get_logger
from trainer.config import RewardControl, TrainerConfig
from trainer.data import (
    EncodedGroup,
    GroupDataError,
    PromptOptions,
    artifact_reader,
    encode_group,
    group_version,
)
from trainer.grpo import checkpoint as ckpt
from trainer.grpo.distributed import Dist
from trainer.grpo.losses import controlled_rewards, has_signal
from trainer.grpo.update import LossSettings, train_step
from trainer.policy import load_policy, load_reference, make_optimizer
from trainer.publish import register, roll_out, version_name, version_spec, write_model_dir

log = get_logger("trainer.loop")

REPORTED = ("reward_mean", "reward_std", "loss", "kl", "clip_fraction", "is_weight_mean")


@dataclass
class UpdateReport:
    """What one call of :meth:`Trainer.run_once` did."""

    update: int | None
    """The update number, or None when nothing was trained."""
    leased: int = 0
    trained: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    policy_version: str | None = None
    published: str | None = None
    group_versions: dict[str, int] = field(default_factory=dict)
    """The planner versions that sampled the trained groups, with their counts."""
    plan_rewards: dict[str, float] = field(default_factory=dict)
    """Every distinct plan text of the leased groups with the best reward it earned there (the
    rewards as the groups carry them, before any control permutes them)."""


def plan_rewards(records: list[GroupRecord]) -> dict[str, float]:
    """Each distinct plan text of ``records`` with the best reward it earned in them (pure)."""
    out: dict[str, float] = {}
    for rec in records:
        for cand in rec.group.candidates:
            out[cand.plan] = max(cand.reward, out.get(cand.plan, cand.reward))
    return out


def finite(figures: dict[str, float]) -> dict[str, float]:
    """The figures a report to the master can carry: the finite ones (JSON and the master hold
    no NaN or infinity; a diverged loss is left out rather than failing the report)."""
    return {k: v for k, v in figures.items() if math.isfinite(v)}


def loss_settings(cfg: TrainerConfig) -> LossSettings:
    return LossSettings(eps_low=cfg.eps_low, eps_high=cfg.eps_high, beta=cfg.beta,
                        scale_std=cfg.scale_std, adv_eps=cfg.adv_eps,
                        aggregation=cfg.aggregation.value, norm_len=cfg.norm_len,
                        tis_cap=cfg.tis_cap, epochs=cfg.epochs_per_update,
                        shared_prompt=cfg.shared_prompt,
                        groups_per_micro_step=cfg.groups_per_micro_step,
                        temperature=cfg.temperature)


class Trainer:
    """Decoupled GRPO on the planner; ``await Trainer(cfg).run()``."""

    def __init__(self, cfg: TrainerConfig, *, dist: Dist | None = None) -> None:
        self.cfg = cfg
        self.dist = dist or Dist.create(cfg.device)
        torch.manual_seed(cfg.seed)
        policy = load_policy(cfg, device=self.dist.device)
        self.processor = policy.processor
        self.lora = policy.lora
        self.ref_model = load_reference(cfg, policy.device, policy.dtype)
        optimizer, self.scheduler = make_optimizer(policy.model, cfg)
        self.model, self.optimizer = self.dist.prepare(policy.model, optimizer)
        self.read = artifact_reader(cfg.artifacts_url)
        self.prompt_options = PromptOptions(max_turns=cfg.max_turns,
                                            keep_images=cfg.keep_images,
                                            answer_mode=cfg.answer_mode,
                                            max_pixels=cfg.max_pixels)
        self.state = ckpt.TrainState(versions=[cfg.initial_version])
        self.checkpoint_path: str | None = None
        self._trained: set[str] = set()
        self._master: MasterClient | None = None
        self._writer: Any = None
        self._started = False
        self._resume()

    # -- set-up ------------------------------------------------------------------------------

    @property
    def master(self) -> MasterClient:
        if self._master is None:
            self._master = MasterClient(self.cfg.master_url, token=self.cfg.master_bearer())
        return self._master

    def _resume(self) -> None:
        path = ckpt.latest_checkpoint(self.cfg.checkpoint_dir)
        if path is None:
            return
        self.state = ckpt.read_state(path)
        sharded_state = Path(path) / ckpt.SHARDED_DIR
        if self.dist.sharded and sharded_state.is_dir():  # FSDP / ZeRO-3: per-process shards
            self.dist.accelerator.load_state(str(sharded_state))
        else:
            self._load_weights(ckpt.load_weights(path))
            ckpt.restore_optimizer(path, self.optimizer, self.scheduler)
        self.checkpoint_path = str(path)
        self._trained = set(self.state.trained)
        log.info("trainer.resumed", checkpoint=str(path), update=self.state.update,
                 version=self.state.versions[-1], pending_acks=len(self.state.pending_acks))

    def _unwrapped(self) -> Any:
        return self.dist.unwrap(self.model)

    def _weights(self) -> dict[str, torch.Tensor]:
        """The trained weights (LoRA adapter, or the trainable parameters), gathered."""
        model = self._unwrapped()
        full = self.dist.full_state_dict(self.model) if self.dist.sharded else None
        if self.lora:
            from peft import get_peft_model_state_dict

            return dict(get_peft_model_state_dict(model, state_dict=full))
        if full is not None:
            trainable = {n for n, p in model.named_parameters() if p.requires_grad}
            return {n: t for n, t in full.items() if n in trainable}
        return {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}

    def _load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        model = self._unwrapped()
        if self.lora:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(model, weights)
        else:
            model.load_state_dict(weights, strict=False)

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, max_updates: int | None = None) -> list[UpdateReport]:
        """Train until ``max_updates`` (or ``cfg.max_updates``) or ``idle_exit_s`` without
        groups; returns the reports of the updates done."""
        limit = max_updates if max_updates is not None else self.cfg.max_updates
        await self.start()
        done: list[UpdateReport] = []
        idle_since = time.monotonic()
        while limit is None or len(done) < limit:
            report = await self.run_once()
            if report.update is not None:
                done.append(report)
                idle_since = time.monotonic()
                continue
            if report.leased == 0:
                idle = time.monotonic() - idle_since
                if self.cfg.idle_exit_s is not None and idle >= self.cfg.idle_exit_s:
                    log.info("trainer.idle_exit", idle_s=round(idle, 1))
                    break
                await asyncio.sleep(self.cfg.poll_s)
        return done

    async def start(self) -> None:
        """After a restart: ack what the checkpoint left pending and publish a version the
        checkpoint is due but may not have reached the master / planners (once)."""
        if self._started:
            return
        self._started = True
        await self._flush_acks()
        due = self.state.update and self.state.update % self.cfg.publish_every == 0
        if due and self.state.published_update < self.state.update:
            await self._publish({})

    async def run_once(self) -> UpdateReport:
        """Lease one batch and train on it (or only ack it when nothing in it is trainable)."""
        records = await self._lease()
        report = UpdateReport(update=None, leased=len(records),
                              policy_version=self.state.versions[-1],
                              plan_rewards=plan_rewards(records))
        if not records:
            return report
        chosen, immediate = self._select(records, report.dropped)
        encoded: list[tuple[GroupRecord, EncodedGroup]] = []
        for rec in chosen:
            try:
                group = encode_group(self.processor, rec.group, self.read, self.prompt_options,
                                     group_id=rec.id)
                group.rewards = controlled_rewards(group.rewards, self.cfg.reward_control,
                                                   rec.id.hex)
                served = self.state.versions
                group.behind = len(served) - 1 - served.index(
                    group_version(rec.group) or self.cfg.initial_version)
                encoded.append((rec, group))
            except GroupDataError as exc:
                log.warning("trainer.group_unusable", group=str(rec.id), error=str(exc))
                immediate.append((rec, GroupStatus.DROPPED))
                report.dropped["bad_data"] = report.dropped.get("bad_data", 0) + 1
        for reason, n in report.dropped.items():
            self.state.count(f"dropped_{reason}", n)
        await self._ack(immediate)
        if not encoded:
            return report
        # the 'zero' control: the update is measured, never taken (weights, optimizer and
        # scheduler untouched), so every version it publishes is the starting policy
        step = self.cfg.reward_control is not RewardControl.ZERO
        metrics = train_step(self.model, self.optimizer, [e for _, e in encoded],
                             loss_settings(self.cfg), self.dist.parallel(self.model),
                             self.ref_model, self.cfg.max_grad_norm, step=step)
        if step:
            self.scheduler.step()
        self.state.update += 1
        self.state.count("consumed", len(encoded))
        self.state.remember([str(rec.id) for rec, _ in encoded])
        self._trained.update(str(rec.id) for rec, _ in encoded)
        self.state.pending_acks += [[str(rec.id), rec.lease_token or "", GroupStatus.CONSUMED]
                                    for rec, _ in encoded]
        report.update, report.trained = self.state.update, len(encoded)
        for _, group in encoded:
            name = group.version or self.cfg.initial_version
            report.group_versions[name] = report.group_versions.get(name, 0) + 1
        metrics["lr"] = float(self.scheduler.get_last_lr()[0])
        if metrics.get("sampler_logprobs_missing"):  # no importance correction for these
            log.warning("trainer.sampler_logprobs_missing", update=self.state.update,
                        groups=int(metrics["sampler_logprobs_missing"]))
        metrics.update({f"dropped_{k}": float(v) for k, v in report.dropped.items()})
        report.metrics = metrics
        if self.state.update % self.cfg.checkpoint_every == 0:
            self._checkpoint()
            await self._flush_acks()
        await self._report(report)
        if self.state.update % self.cfg.publish_every == 0:
            report.published = await self._publish(metrics)
        log.info("trainer.update", update=report.update, groups=report.trained,
                 reward=round(metrics["reward_mean"], 4), loss=round(metrics["loss"], 5),
                 version=self.state.versions[-1], dropped=report.dropped or None)
        return report

    # -- pieces ------------------------------------------------------------------------------

    async def _lease(self) -> list[GroupRecord]:
        items: list[GroupRecord] = []
        if self.dist.is_main:
            req = GroupLeaseRequest(max_groups=self.cfg.groups_per_update,
                                    ttl_s=self.cfg.lease_ttl_s)
            items = (await self.master.lease_groups(req)).items
        payload = self.dist.broadcast([r.model_dump(mode="json") for r in items])
        return [GroupRecord.model_validate(r) for r in payload]

    def _select(self, records: list[GroupRecord], dropped: dict[str, int]
                ) -> tuple[list[GroupRecord], list[tuple[GroupRecord, GroupStatus]]]:
        """Which groups to train on, and which to ack at once (with their status)."""
        chosen: list[GroupRecord] = []
        immediate: list[tuple[GroupRecord, GroupStatus]] = []
        versions = self.state.versions
        for rec in records:
            reason = None
            status = GroupStatus.DROPPED
            version = group_version(rec.group) or self.cfg.initial_version
            if str(rec.id) in self._trained:
                reason, status = "already_trained", GroupStatus.CONSUMED
            elif version not in versions:
                reason = "unknown_version"
            elif len(versions) - 1 - versions.index(version) > self.cfg.max_staleness:
                reason = "stale"
            elif any((c.planner_version or self.cfg.initial_version) != version
                     for c in rec.group.candidates):
                reason = "version_mismatch"  # its plans are not all the version it names
            elif not has_signal(torch.tensor([c.reward for c in rec.group.candidates])):
                reason = "no_signal"
            if reason is None:
                chosen.append(rec)
            else:
                dropped[reason] = dropped.get(reason, 0) + 1
                immediate.append((rec, status))
        return chosen, immediate

    async def _ack(self, acks: list[tuple[GroupRecord, GroupStatus]]) -> None:
        if not self.dist.is_main:
            return
        for rec, status in acks:
            await self._ack_one(str(rec.id), rec.lease_token or "", status)

    async def _ack_one(self, group_id: str, token: str, status: GroupStatus | str) -> bool:
        try:
            await self.master.ack_group(uuid.UUID(group_id), token, GroupStatus(status))
            return True
        except ServiceError as exc:
            if exc.status != 409:  # 409: the lease ran out; the ledger catches a re-lease
                raise
            log.info("trainer.ack_lease_lost", group=group_id, detail=str(exc.detail))
            return False

    async def _flush_acks(self) -> None:
        """Ack the groups of the last checkpointed update(s), then record that in the ledger."""
        if not self.state.pending_acks:
            return
        if self.dist.is_main:
            for group_id, token, status in self.state.pending_acks:
                await self._ack_one(group_id, token, status)
        self.state.pending_acks = []
        if self.checkpoint_path and self.dist.is_main:
            ckpt.update_state(self.checkpoint_path, self.state)
        self.dist.barrier()

    def _checkpoint(self) -> None:
        weights = self._weights()
        sharded = None
        if self.dist.sharded:  # optimizer state lives in shards: every process saves its own
            sharded = Path(self.cfg.checkpoint_dir) / f".sharded-{self.state.update:06d}"
            self.dist.accelerator.save_state(str(sharded))
        if self.dist.is_main:
            optimizer = None if sharded is not None else self.optimizer
            path = ckpt.save_checkpoint(self.cfg.checkpoint_dir, self.state, weights,
                                        optimizer, self.scheduler,
                                        keep=self.cfg.keep_checkpoints, sharded_state=sharded)
            self.checkpoint_path = str(path)
        self.dist.barrier()
        self.checkpoint_path = self.dist.broadcast(self.checkpoint_path)

    async def _report(self, report: UpdateReport) -> None:
        if not self.dist.is_main or report.update is None:
            return
        if self.cfg.tensorboard_dir:
            self._tensorboard(report)
        try:
            body = TrainingMetricsReport(run=self.cfg.run_name, update=report.update,
                                         planner_version=report.policy_version or "",
                                         metrics=finite(report.metrics))
            await self.master.report_training(body)
        except (ServiceError, httpx.HTTPError) as exc:  # figures must never stop training
            log.warning("trainer.metrics_report_failed", error=str(exc))

    def _tensorboard(self, report: UpdateReport) -> None:
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise RuntimeError("tensorboard_dir needs the 'tensorboard' extra: "
                                   "pip install 'coda[tensorboard]'") from exc
            self._writer = SummaryWriter(self.cfg.tensorboard_dir)
        for key, value in report.metrics.items():
            group = "losses" if key in ("loss", "kl", "clip_fraction", "grad_norm") else "charts"
            self._writer.add_scalar(f"{group}/{key}", value, report.update)
        self._writer.flush()

    async def _publish(self, metrics: dict[str, float]) -> str | None:
        """Write, register and roll out the current weights as a new planner version."""
        version = version_name(self.cfg.run_name, self.state.update)
        model = self._unwrapped()
        full = self.dist.full_state_dict(self.model) if self.dist.sharded else None
        if self.dist.is_main:
            def save(out: str) -> None:
                if full is not None:
                    model.save_pretrained(out, state_dict=full)
                else:
                    model.save_pretrained(out)

            uri = write_model_dir(save, self.cfg.adapter_root(), version)
            figures = finite({k: float(metrics[k]) for k in REPORTED if k in metrics})
            spec = version_spec(version, base_model=self.cfg.model,
                                adapter_uri=uri if self.lora else None,
                                parent=self.state.versions[-1], metrics=figures)
            if not self.lora:
                spec.base_model = uri  # a full model: the planners need a restart to serve it
            await register(self.master, spec)
            if self.lora and self.cfg.planner_urls:
                keep = [*self.state.versions[-(self.cfg.keep_loaded - 1):], version] \
                    if self.cfg.keep_loaded > 1 else [version]
                await roll_out(self.cfg.planner_urls, version, self.cfg.planner_uri(uri, version),
                               keep=keep,
                               run_prefix=f"{self.cfg.run_name}-",
                               token=self.cfg.planner_bearer())
        if version not in self.state.versions:
            self.state.versions.append(version)
        self.state.published_update = self.state.update
        if self.checkpoint_path and self.dist.is_main:
            ckpt.update_state(self.checkpoint_path, self.state)
        self.dist.barrier()
        log.info("trainer.version_published", version=version, update=self.state.update)
        return version

    async def aclose(self) -> None:
        if self._master is not None:
            await self._master.aclose()
        if self._writer is not None:
            self._writer.close()
