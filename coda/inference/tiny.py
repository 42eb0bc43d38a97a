"""A tiny random Qwen2.5-VL (model + tokenizer + processor) and a random LoRA for it, offline.

Tests and the embedded default (``coda up``) need a real VLM but no weights can be downloaded,
so the model is built locally. The recipe (tokenizer corpus, special tokens, chat template,
image-processor settings, model sizes, mrope sections) comes from the project reference
``reference/tiny_qwen25vl.py`` (transformers 5.23 / torch 2.13 CPU); keep the two in step.
Building takes a few seconds and is deterministic for a given ``seed``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessorPil,
)

from coda.inference.encoding import DEFAULT_MAX_PIXELS, ensure_processor_workaround

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]  # fmt: skip

_CORPUS = [
    "Thought: I will click the File menu.\nAction: click(start_box='(234,56)')",
    "You are a GUI agent. You are given a task and your action history, with screenshots.",
    "type(content='hello world\\n') hotkey(key='ctrl s') scroll(direction='down') finished()",
    "drag(start_box='(1,2)', end_box='(3,4)') 0123456789 system user assistant",
] * 20

# The Qwen2-VL / Qwen2.5-VL chat template.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TEXT_HIDDEN = 128
TEXT_HEADS = 2  # head_dim = 128 / 2 = 64: vLLM's CPU attention kernel refuses head_dim 16
MROPE_SECTION = [8, 12, 12]  # sums to head_dim / 2
VISION_HIDDEN = 64
VISION_HEADS = 2


def token_id(tokenizer: PreTrainedTokenizerFast, token: str) -> int:
    value = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(value, int):
        raise TypeError(f"token {token!r}: expected one id, got {value!r}")
    return value


def build_tokenizer(corpus: Sequence[str] = (), vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (~400 tokens by default) with the Qwen2.5-VL special tokens.

    ``corpus`` adds texts to the BPE training corpus and ``vocab_size`` bounds the vocabulary:
    a model meant to write a domain's text (the closed-loop learning run's planner) gets merges
    for that text, so its plans are a few dozen tokens instead of one per character, as a real
    model's 150k-token vocabulary makes them."""
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=not corpus)
    # with a domain corpus, words (split at spaces only) may merge whole: "p:=log(3)/log(2)"
    # becomes one token, as a large vocabulary makes a familiar phrase a token or two
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(" ", "merged_with_next"), byte_level]) if corpus else byte_level
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([*_CORPUS, *corpus], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:], model_max_length=32768,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_processor(tokenizer: PreTrainedTokenizerFast) -> Qwen2_5_VLProcessor:
    """PIL image processor (no torchvision) with UI-TARS-1.5's pixel bounds, plus the tokenizer."""
    ensure_processor_workaround()
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=14, temporal_patch_size=2, merge_size=2,
        min_pixels=4 * 28 * 28, max_pixels=DEFAULT_MAX_PIXELS,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    return Qwen2_5_VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )


def build_config(tokenizer: PreTrainedTokenizerFast) -> Qwen2_5_VLConfig:
    """A 2-layer text model (hidden 128, head_dim 64) with a 2-block vision tower (hidden 64).

    head_dim 64 is the smallest shape vLLM's CPU attention accepts, so the same weights run under
    the transformers backend, ``transformers serve`` and vLLM (``reference/vllm-cpu.md``).
    """
    ids = {t: token_id(tokenizer, t) for t in SPECIAL_TOKENS}
    text_config = {
        "vocab_size": len(tokenizer), "hidden_size": TEXT_HIDDEN, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": TEXT_HEADS, "num_key_value_heads": 1,
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                            "mrope_section": MROPE_SECTION},
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"], "tie_word_embeddings": False,
    }
    vision_config = {
        "depth": 2, "hidden_size": VISION_HIDDEN, "intermediate_size": 2 * VISION_HIDDEN,
        "num_heads": VISION_HEADS,
        "out_hidden_size": TEXT_HIDDEN, "patch_size": 14, "spatial_merge_size": 2,
        "temporal_patch_size": 2, "window_size": 112, "fullatt_block_indexes": [1],
        "in_channels": 3,
    }
    return Qwen2_5_VLConfig(
        text_config=text_config, vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def build_tiny_qwen25vl(out_dir: str | Path, seed: int = 0, corpus: Sequence[str] = (),
                        vocab_size: int = 600) -> Path:
    """Build and save the tiny random Qwen2.5-VL model + processor into ``out_dir``
    (``corpus``, ``vocab_size``: see :func:`build_tokenizer`)."""
    out = Path(out_dir)
    tokenizer = build_tokenizer(corpus, vocab_size)
    processor = build_processor(tokenizer)
    config = build_config(tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config).eval()
    model.generation_config.eos_token_id = token_id(tokenizer, "<|im_end|>")
    model.generation_config.pad_token_id = token_id(tokenizer, "<|endoftext|>")
    # `transformers serve` never sets do_sample=True itself; without this it ignores temperature.
    model.generation_config.do_sample = True
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    write_video_processor_config(out, processor)
    return out


def write_video_processor_config(out: Path, processor: Qwen2_5_VLProcessor) -> None:
    """Write ``video_preprocessor_config.json``: vLLM loads the whole Qwen2.5-VL processor.

    Written by hand rather than by ``Qwen2VLVideoProcessor.save_pretrained`` because that class
    needs torchvision, which the project's CPU venv lacks; the values mirror the image
    processor's (patch, temporal patch and merge sizes, normalisation).
    """
    image = processor.image_processor
    config = {
        "video_processor_type": "Qwen2VLVideoProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
        "patch_size": image.patch_size, "temporal_patch_size": image.temporal_patch_size,
        "merge_size": image.merge_size,
        "size": {"shortest_edge": 4 * 28 * 28, "longest_edge": 256 * 28 * 28},
        "image_mean": list(image.image_mean), "image_std": list(image.image_std),
        "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
        "rescale_factor": 1 / 255, "resample": 3,
    }
    (out / "video_preprocessor_config.json").write_text(json.dumps(config, indent=2) + "\n")


def build_tiny_lora(
    model_dir: str | Path, out_dir: str | Path, seed: int = 0, rank: int = 8
) -> Path:
    """Save a random (non-zero) peft LoRA on the text model's q_proj/v_proj of ``model_dir``."""
    from peft import LoraConfig, get_peft_model

    out = Path(out_dir)
    base = Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir)
    config = LoraConfig(
        r=rank, lora_alpha=4 * rank, lora_dropout=0.0,
        target_modules=r".*language_model.*\.(q_proj|v_proj)",
        init_lora_weights=False,  # random A and B: the adapter changes the outputs
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft calls a deprecated transformers API
        torch.manual_seed(seed)
        peft_model = get_peft_model(base, config)
    out.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out))
    return out
