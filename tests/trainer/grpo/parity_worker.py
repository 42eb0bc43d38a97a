"""One GRPO update on a fixed batch of groups, in one process or under ``torchrun`` (gloo on
CPU, through accelerate); rank 0 writes the loss and the updated LoRA weights.

    python tests/trainer/grpo/parity_worker.py GROUPS.json ARTIFACTS_DIR MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from peft import get_peft_model_state_dict
from safetensors.torch import save_file

from coda.contracts.training import Group
from trainer.config import TrainerConfig
from trainer.data import PromptOptions, artifact_reader, encode_group
from trainer.grpo.distributed import Dist
from trainer.grpo.loop import loss_settings
from trainer.grpo.update import train_step
from trainer.policy import load_policy, make_optimizer


def main(groups_file: str, artifacts: str, model_dir: str, out_dir: str) -> None:
    cfg = TrainerConfig(model=model_dir, device="cpu", lora_rank=4, learning_rate=1e-2,
                        max_pixels=112 * 112, beta=0.04, groups_per_micro_step=1,
                        groups_per_update=8, seed=0)
    dist = Dist.create("cpu")
    torch.manual_seed(cfg.seed)
    policy = load_policy(cfg, device=dist.device)
    optimizer, _ = make_optimizer(policy.model, cfg)
    model, optimizer = dist.prepare(policy.model, optimizer)
    read = artifact_reader(f"file://{artifacts}")
    groups = [encode_group(policy.processor, Group.model_validate(g), read,
                           PromptOptions(max_pixels=cfg.max_pixels))
              for g in json.loads(Path(groups_file).read_text())]
    metrics = train_step(model, optimizer, groups, loss_settings(cfg), dist.parallel(model),
                         max_grad_norm=cfg.max_grad_norm)
    if dist.is_main:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({**metrics, "world": dist.world}))
        weights = get_peft_model_state_dict(dist.unwrap(model))
        save_file({k: v.detach().contiguous() for k, v in weights.items()},
                  str(out / "weights.safetensors"))
    dist.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:5])
