"""Loading the planner to train: processor, model, LoRA (peft) or full fine-tuning, precision."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch

from coda.inference.encoding import ensure_processor_workaround
from coda.logging import get_logger
from trainer.config import Precision, TrainerConfig

log = get_logger("trainer.policy")


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(precision: Precision, device: str) -> torch.dtype:
    """bf16 only where the hardware has it (``auto``); fp32 otherwise."""
    has_bf16 = device.startswith("cuda") and torch.cuda.is_available() and \
        torch.cuda.is_bf16_supported()
    if precision is Precision.BF16:
        if not has_bf16 and not device.startswith("cpu"):
            raise ValueError("precision: bf16 is not supported on this device")
        return torch.bfloat16
    if precision is Precision.AUTO and has_bf16:
        return torch.bfloat16
    return torch.float32


@dataclass
class Policy:
    """The trained model (a peft model with LoRA) and its processor."""

    model: Any
    processor: Any
    device: str
    dtype: torch.dtype
    lora: bool


def _lora_config(cfg: TrainerConfig) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=cfg.lora_targets, bias="none")


def load_policy(cfg: TrainerConfig, *, device: str | None = None) -> Policy:
    """Processor and model from ``cfg.model``, LoRA attached (fresh or from ``init_adapter``)."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    ensure_processor_workaround()
    dev = resolve_device(device or cfg.device)
    dtype = resolve_dtype(cfg.precision, dev)
    processor = AutoProcessor.from_pretrained(cfg.model)
    model: Any = AutoModelForImageTextToText.from_pretrained(cfg.model, dtype=dtype)
    if cfg.gradient_checkpointing:
        model.activation_checkpointing_enable(  # transformers' new name of gradient checkpointing
            activation_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if cfg.lora:
        from peft import PeftModel, get_peft_model

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft uses a deprecated API
            if cfg.init_adapter:
                model = PeftModel.from_pretrained(model, cfg.init_adapter, is_trainable=True)
            else:
                model = get_peft_model(model, _lora_config(cfg))
    else:
        for name, param in model.named_parameters():  # the vision tower stays frozen
            param.requires_grad = "visual" not in name
    model.to(dev)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("trainer.policy_loaded", model=cfg.model, device=dev, dtype=str(dtype), lora=cfg.lora,
             trainable_params=trainable)
    return Policy(model=model, processor=processor, device=dev, dtype=dtype, lora=cfg.lora)


def load_reference(cfg: TrainerConfig, device: str, dtype: torch.dtype) -> Any | None:
    """A frozen copy of the base model, needed only for a KL term with full fine-tuning."""
    if cfg.lora or cfg.beta == 0:
        return None
    from transformers import AutoModelForImageTextToText

    ref: Any = AutoModelForImageTextToText.from_pretrained(cfg.model, dtype=dtype)
    ref = ref.to(device).eval()
    for p in ref.parameters():
        p.requires_grad = False
    return ref


def make_optimizer(model: Any, cfg: TrainerConfig) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW over the trainable parameters and a linear warm-up schedule."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    warm = cfg.warmup_updates
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warm) if warm else 1.0)
    return optimizer, scheduler
