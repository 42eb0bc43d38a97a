"""Per-token log-probabilities of a group's G plans under the policy.

Two encodings give the same numbers:

* **shared** (default): ONE sequence ``[prompt][plan 1]...[plan G]`` with a block attention
  mask — every plan attends to the prompt and to its own earlier tokens only — and each plan's
  positions continuing from the end of the prompt (the model's multimodal rope positions for
  the prompt). The screenshots go through the vision tower once and the prompt tokens through
  the language model once, instead of G times. No KV cache is used, so it works with gradient
  checkpointing and the gradient flows through the prompt's keys and values.
* **separate**: G sequences ``[prompt][plan i]`` (right-padded), images repeated: what a plain
  implementation does; the benchmark's baseline and the tests' reference.

Only the positions that predict plan tokens are projected onto the vocabulary
(``logits_to_keep``), so the prompt never costs a vocabulary-sized row.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from trainer.data import EncodedGroup

_VISION_KEYS = ("pixel_values", "image_grid_thw")


def rope_module(model: Any) -> Any | None:
    """The module computing Qwen2-VL-style multimodal rope positions, if the model has one."""
    for module in model.modules():
        if callable(getattr(module, "get_rope_index", None)):
            return module
    return None


def prompt_positions(model: Any, prompt: dict[str, Tensor]) -> Tensor:
    """``[3, P]`` rope positions of a single prompt (text positions repeated for text models)."""
    ids = prompt["input_ids"]
    rope = rope_module(model)
    if rope is None or "mm_token_type_ids" not in prompt:
        return torch.arange(ids.shape[1], device=ids.device).expand(3, -1)
    positions, _ = rope.get_rope_index(
        input_ids=ids, mm_token_type_ids=prompt["mm_token_type_ids"],
        image_grid_thw=prompt.get("image_grid_thw"), attention_mask=prompt.get("attention_mask"))
    return positions[:, 0, :]


def _selective_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """log softmax(logits / temperature)[targets] without materialising the full log-softmax."""
    logits = logits.float() / temperature if temperature != 1.0 else logits.float()
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def _pad_rows(rows: list[Tensor], width: int) -> Tensor:
    out = rows[0].new_zeros((len(rows), width))
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row
    return out


def shared_logprobs(model: Any, group: EncodedGroup, temperature: float = 1.0) -> Tensor:
    """``[G, Lmax]`` log-probs of the plans from one packed forward (zeros on padding)."""
    prompt = group.prompt
    device = prompt["input_ids"].device
    p_len = group.prompt_len
    comps = [torch.tensor(c, dtype=torch.long, device=device) for c in group.completions]
    ids = torch.cat([prompt["input_ids"][0], *comps]).unsqueeze(0)
    total = ids.shape[1]

    # block ids: 0 = prompt, i + 1 = plan i; a token sees earlier tokens of the prompt or its block
    block = torch.cat([torch.zeros(p_len, dtype=torch.long, device=device)]
                      + [torch.full((len(c),), i + 1, device=device) for i, c in enumerate(comps)])
    causal = torch.ones(total, total, dtype=torch.bool, device=device).tril()
    visible = causal & ((block.unsqueeze(0) == 0) | (block.unsqueeze(0) == block.unsqueeze(1)))
    dtype = next(p for p in model.parameters()).dtype
    mask = torch.zeros(total, total, dtype=dtype, device=device)
    mask = mask.masked_fill(~visible, torch.finfo(dtype).min)[None, None]

    pos_prompt = prompt_positions(model, prompt)
    start = int(pos_prompt.max()) + 1
    pos_plans = [torch.arange(len(c), device=device) + start for c in comps]
    positions = torch.cat([pos_prompt, *(p.expand(3, -1) for p in pos_plans)], dim=1)

    # the row predicting plan i's token t: the prompt's last token (t = 0) or the plan's t - 1
    keep_rows, offset = [], p_len
    for c in comps:
        keep_rows.append(torch.cat([torch.tensor([p_len - 1], device=device),
                                    torch.arange(offset, offset + len(c) - 1, device=device)]))
        offset += len(c)
    keep = torch.unique(torch.cat(keep_rows))
    where = {int(k): j for j, k in enumerate(keep.tolist())}

    extra = {k: prompt[k] for k in _VISION_KEYS if k in prompt}
    pos_arg = positions.unsqueeze(1) if rope_module(model) is not None else positions[:1]
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos_arg, use_cache=False,
                logits_to_keep=keep, **extra)
    logits = out.logits[0]
    rows = []
    for c, kept in zip(comps, keep_rows, strict=True):
        index = torch.tensor([where[int(k)] for k in kept.tolist()], device=device)
        rows.append(_selective_logprobs(logits[index], c, temperature))
    return _pad_rows(rows, max(group.lengths))


def separate_logprobs(model: Any, group: EncodedGroup, temperature: float = 1.0) -> Tensor:
    """``[G, Lmax]`` log-probs with each plan's full input encoded separately (the baseline)."""
    prompt = group.prompt
    n = len(group.completions)
    p_len, width = group.prompt_len, max(group.lengths)
    device = prompt["input_ids"].device
    pad = 0
    ids = torch.full((n, p_len + width), pad, dtype=torch.long, device=device)
    attn = torch.zeros((n, p_len + width), dtype=torch.long, device=device)
    for i, c in enumerate(group.completions):
        ids[i, :p_len] = prompt["input_ids"][0]
        ids[i, p_len:p_len + len(c)] = torch.tensor(c, device=device)
        attn[i, :p_len] = prompt["attention_mask"][0]
        attn[i, p_len:p_len + len(c)] = 1
    extra: dict[str, Tensor] = {}
    if "pixel_values" in prompt:
        extra["pixel_values"] = prompt["pixel_values"].repeat(n, 1)
        extra["image_grid_thw"] = prompt["image_grid_thw"].repeat(n, 1)
    if "mm_token_type_ids" in prompt:
        mm = torch.zeros_like(ids)
        mm[:, :p_len] = prompt["mm_token_type_ids"][0]
        extra["mm_token_type_ids"] = mm
    keep = torch.arange(p_len - 1, p_len + width - 1, device=device)
    out = model(input_ids=ids, attention_mask=attn, use_cache=False, logits_to_keep=keep,
                **extra)
    targets = ids[:, p_len:]
    logp = _selective_logprobs(out.logits, targets, temperature)
    return logp * group.mask().to(device=device, dtype=logp.dtype)


def plan_logprobs(model: Any, group: EncodedGroup, *, shared: bool = True,
                  temperature: float = 1.0) -> Tensor:
    """``[G, Lmax]`` per-token log-probs of a group's plans (see the module docstring) under
    the sampling distribution at ``temperature`` (logits / temperature, as the sampler)."""
    if shared:
        return shared_logprobs(model, group, temperature)
    return separate_logprobs(model, group, temperature)


def move_group(group: EncodedGroup, device: torch.device | str) -> EncodedGroup:
    """The group with its prompt tensors on ``device``."""
    group.prompt = {k: v.to(device) for k, v in group.prompt.items()}
    return group
