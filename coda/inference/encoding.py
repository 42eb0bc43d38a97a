"""Prompt encoding shared by the in-process backend and the trainer.

OpenAI-format conversations become chat-template text and their images (each image URL decoded
once, each distinct image kept once), then tokenized, left-padded model inputs. The trainer
encodes with :func:`build_model_inputs` so it tokenizes exactly like the service
(:mod:`coda.inference.transformers_local`), which runs ``generate`` on the same encoding.

Importing this module applies :func:`ensure_processor_workaround`, so processors load without
torchvision.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from transformers import BatchFeature
from transformers.processing_utils import ProcessorMixin

from coda.inference.base import ChatMessage
from coda.inference.images import bound_pixels, decode_part

DEFAULT_MAX_PIXELS = 16384 * 28 * 28
"""Same bound as UI-TARS-1.5 / Qwen2.5-VL serving; services pass a lower one to save memory."""

_WORKAROUND_FLAG = "_coda_video_free"


def ensure_processor_workaround() -> bool:
    """Let processors load without torchvision (idempotent); True when it is applied.

    Qwen2.5-VL's processor has a ``video_processor`` attribute whose class is a dummy without
    torchvision, so building or loading the processor fails. Dropping the video
    sub-processors keeps images working (see ``reference/tiny_qwen25vl.py``, step 0).
    """
    if importlib.util.find_spec("torchvision") is not None:
        return False
    if getattr(ProcessorMixin, _WORKAROUND_FLAG, False):
        return True
    original = ProcessorMixin.get_attributes.__func__  # type: ignore[attr-defined]

    def get_attributes(cls: type) -> list[str]:
        return [a for a in original(cls) if "video" not in a]

    ProcessorMixin.get_attributes = classmethod(get_attributes)  # type: ignore[method-assign,assignment]
    setattr(ProcessorMixin, _WORKAROUND_FLAG, True)
    return True


ensure_processor_workaround()



def to_processor_messages(
    messages: Sequence[ChatMessage],
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    cache: dict[str, Image.Image] | None = None,
) -> tuple[list[dict[str, Any]], list[Image.Image]]:
    """OpenAI-format messages -> chat-template messages with image placeholders, and the images.

    Text parts stay text parts, ``image_url`` parts become ``{"type": "image"}`` and their
    decoded (size-bounded) images are returned in order of appearance. ``cache`` (URL -> image)
    lets several conversations decode a URL they share once.
    """
    converted: list[dict[str, Any]] = []
    images: list[Image.Image] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "user", "assistant"):
            raise ValueError(f"messages[{i}].role: expected system/user/assistant, got {role!r}")
        content = message.get("content")
        if content is None:
            content = ""
        if isinstance(content, str):
            converted.append({"role": role, "content": [{"type": "text", "text": content}]})
            continue
        if not isinstance(content, list):
            raise ValueError(f"messages[{i}].content: expected a string or a list of parts")
        parts: list[dict[str, Any]] = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": str(part.get("text", ""))})
            elif kind in ("image_url", "image"):
                try:
                    images.append(_decoded(part, max_pixels, cache))
                except ValueError as exc:
                    raise ValueError(f"messages[{i}].content[{j}].{exc}") from exc
                parts.append({"type": "image"})
            else:
                raise ValueError(f"messages[{i}].content[{j}].type: unsupported {kind!r}")
        converted.append({"role": role, "content": parts})
    return converted, images


def render_prompt(
    processor: Any, messages: Sequence[dict[str, Any]], *, continue_final_message: bool = False
) -> str:
    """The chat-template text; with ``continue_final_message`` it ends inside the last message."""
    if continue_final_message and (not messages or messages[-1]["role"] != "assistant"):
        raise ValueError("messages[-1].role: must be 'assistant' to continue the final message")
    text = processor.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=not continue_final_message,
        continue_final_message=continue_final_message,
    )
    return str(text)


def _decoded(
    part: dict[str, Any], max_pixels: int | None, cache: dict[str, Image.Image] | None
) -> Image.Image:
    """The size-bounded image of a part; URL parts are looked up in / added to ``cache``."""
    url = None if isinstance(part.get("image"), Image.Image) else part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if cache is None or not isinstance(url, str):
        return bound_pixels(decode_part(part), max_pixels)
    if url not in cache:
        cache[url] = bound_pixels(decode_part(part), max_pixels)
    return cache[url]


def _image_key(image: Image.Image) -> tuple[str, tuple[int, int], bytes]:
    """Identifies an image by its pixels (two parts showing the same pixels share work)."""
    return image.mode, image.size, hashlib.blake2b(image.tobytes(), digest_size=16).digest()


@dataclass(frozen=True)
class PromptBatch:
    """Rendered prompts and their images, each distinct image once."""

    texts: list[str]
    images: list[Image.Image]
    """Distinct images in order of first appearance."""
    image_index: list[int]
    """For each image placeholder of the batch, in order: its index into :attr:`images`."""


def prepare_prompts(
    processor: Any,
    conversations: Sequence[Sequence[ChatMessage]],
    *,
    continue_final_message: bool = False,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> PromptBatch:
    """Render the conversations; decode each image URL once and keep each distinct image once."""
    texts: list[str] = []
    images: list[Image.Image] = []
    index: list[int] = []
    seen: dict[tuple[str, tuple[int, int], bytes], int] = {}
    by_object: dict[int, int] = {}  # the images stay referenced (cache, conv_images) meanwhile
    cache: dict[str, Image.Image] = {}
    for k, messages in enumerate(conversations):
        try:
            converted, conv_images = to_processor_messages(messages, max_pixels, cache)
            texts.append(render_prompt(processor, converted,
                                       continue_final_message=continue_final_message))
        except ValueError as exc:
            if len(conversations) > 1:
                raise ValueError(f"conversations[{k}].{exc}") from exc
            raise
        for image in conv_images:
            if id(image) not in by_object:  # a URL decoded once is one object: hash it once
                key = _image_key(image)
                if key not in seen:
                    seen[key] = len(images)
                    images.append(image)
                by_object[id(image)] = seen[key]
            index.append(by_object[id(image)])
    return PromptBatch(texts, images, index)


def processor_inputs(processor: Any, batch: PromptBatch) -> Any:
    """The plain path: one ``processor(...)`` call over every placeholder's image."""
    images = [batch.images[i] for i in batch.image_index]
    return processor(text=batch.texts, images=images or None, padding=True, padding_side="left",
                     return_tensors="pt")


def shares_images(processor: Any) -> bool:
    """Whether the processor can expand placeholders for images it preprocessed separately
    (Qwen2-VL family: ``replace_image_token`` from ``image_grid_thw``)."""
    own = getattr(type(processor), "replace_image_token", None)
    return (
        isinstance(processor, ProcessorMixin)
        and own is not None and own is not ProcessorMixin.replace_image_token
        and getattr(processor, "image_token", None) is not None
        and hasattr(processor, "image_processor")
    )


@dataclass(frozen=True)
class EncodedPrompts:
    """Tokenized prompts (``text``: ids, mask, ``mm_token_type_ids`` and one
    ``image_grid_thw`` row per placeholder) and the pixels of each DISTINCT image once."""

    text: BatchFeature
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    image_index: list[int]

    def tiled_pixel_values(self) -> torch.Tensor | None:
        """The pixels of every placeholder in order (what the processor returns for the batch)."""
        if self.pixel_values is None or self.image_grid_thw is None:
            return None
        chunks = torch.split(self.pixel_values, self.image_grid_thw.prod(-1).tolist())
        return torch.cat([chunks[i] for i in self.image_index])


def encode_prompts(processor: Any, batch: PromptBatch) -> EncodedPrompts:
    """Preprocess each distinct image once and tokenize the prompts, expanding every image
    placeholder into as many image tokens as its image has (exactly as ``processor(...)`` does
    for the full image list; requires :func:`shares_images`)."""
    texts = list(batch.texts)
    pixel_values = grid = None
    if batch.images:
        processed = processor.image_processor(batch.images, return_tensors="pt")
        pixel_values, grid = processed["pixel_values"], processed["image_grid_thw"]
        replacements = [processor.replace_image_token(processed, image_idx=i)
                        for i in range(len(batch.images))]
        texts, _ = processor.get_text_with_replacements(
            texts, images_replacements=[replacements[i] for i in batch.image_index])
    text = processor.tokenizer(texts, padding=True, padding_side="left", return_tensors="pt")
    if getattr(processor, "return_mm_token_type_ids", False):
        text["mm_token_type_ids"] = torch.tensor(
            processor.create_mm_token_type_ids(text["input_ids"]), dtype=torch.long)
    if grid is not None:
        text["image_grid_thw"] = grid[batch.image_index]
    return EncodedPrompts(BatchFeature(dict(text)), pixel_values, grid, batch.image_index)


def build_model_inputs(
    processor: Any,
    conversations: Sequence[Sequence[ChatMessage]],
    *,
    continue_final_message: bool = False,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    share_images: bool = True,
) -> Any:
    """Tokenized, left-padded model inputs (a ``BatchFeature``) for OpenAI-format conversations.

    With ``share_images`` (and a processor that supports it) an image several prompts show is
    decoded and preprocessed once and its pixels repeated; the result equals one
    ``processor(...)`` call over every image (``share_images=False``).
    """
    batch = prepare_prompts(processor, conversations,
                            continue_final_message=continue_final_message, max_pixels=max_pixels)
    if not (share_images and shares_images(processor)):
        return processor_inputs(processor, batch)
    encoded = encode_prompts(processor, batch)
    data = dict(encoded.text)
    pixel_values = encoded.tiled_pixel_values()
    if pixel_values is not None:
        data = {**{k: v for k, v in data.items() if k != "image_grid_thw"},
                "pixel_values": pixel_values, "image_grid_thw": data["image_grid_thw"]}
    return BatchFeature(data)
