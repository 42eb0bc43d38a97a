"""Processes working on one update, through accelerate.

One process by default. Under ``accelerate launch`` (or ``torchrun``) every process runs the
same loop: rank 0 talks to the master and broadcasts the leased groups; each process trains on
its share (``trainer.grpo.update``); the configuration (DDP, FSDP, DeepSpeed ZeRO-3, gloo on CPU)
comes from accelerate (``deploy/accelerate/``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist

from trainer.grpo.update import Parallel

_OPS = {"sum": torch_dist.ReduceOp.SUM, "max": torch_dist.ReduceOp.MAX,
        "min": torch_dist.ReduceOp.MIN}


@dataclass
class Dist:
    accelerator: Any

    @classmethod
    def create(cls, device: str = "auto") -> Dist:
        from accelerate import Accelerator

        cpu = device == "cpu" or (device == "auto" and not torch.cuda.is_available())
        return cls(Accelerator(cpu=cpu))

    @property
    def device(self) -> str:
        return str(self.accelerator.device)

    @property
    def rank(self) -> int:
        return int(self.accelerator.process_index)

    @property
    def world(self) -> int:
        return int(self.accelerator.num_processes)

    @property
    def is_main(self) -> bool:
        return bool(self.accelerator.is_main_process)

    def prepare(self, model: Any, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        model, optimizer = self.accelerator.prepare(model, optimizer)
        return model, optimizer

    @property
    def sharded(self) -> bool:
        """FSDP or DeepSpeed: weights and optimizer state are split over the processes."""
        return str(self.accelerator.distributed_type) in ("DistributedType.FSDP",
                                                            "DistributedType.DEEPSPEED",
                                                            "FSDP", "DEEPSPEED")

    def full_state_dict(self, model: Any) -> dict[str, torch.Tensor]:
        """The whole model's state dict, gathered (collective under FSDP / ZeRO-3: every
        process must call it); complete on the main process."""
        return dict(self.accelerator.get_state_dict(model))

    def unwrap(self, model: Any) -> Any:
        return self.accelerator.unwrap_model(model)

    def barrier(self) -> None:
        if self.world > 1:
            self.accelerator.wait_for_everyone()

    def broadcast(self, obj: Any) -> Any:
        """``obj`` of rank 0, in every process."""
        if self.world == 1:
            return obj
        from accelerate.utils import broadcast_object_list

        box = [obj]
        broadcast_object_list(box, from_process=0)
        return box[0]

    def all_reduce(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        out = tensor.clone().to(self.accelerator.device)
        torch_dist.all_reduce(out, op=_OPS[op])
        return out.cpu()

    def parallel(self, model: Any) -> Parallel:
        """The hooks :func:`trainer.grpo.update.train_step` needs for this process."""
        acc = self.accelerator

        def no_sync() -> contextlib.AbstractContextManager[Any]:
            return acc.no_sync(model)

        def clip(max_norm: float) -> float:
            return float(acc.clip_grad_norm_(
                [p for p in model.parameters() if p.requires_grad], max_norm))

        return Parallel(rank=self.rank, world=self.world, backward=acc.backward, no_sync=no_sync,
                        clip_grad=clip, all_reduce=self.all_reduce if self.world > 1 else None)
