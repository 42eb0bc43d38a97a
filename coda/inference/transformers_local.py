"""In-process transformers backend (AutoProcessor + AutoModelForImageTextToText).

Used by the embedded default (``coda up``), the tests (tiny random Qwen2.5-VL) and the trainer,
which reuses :attr:`TransformersBackend.model` / :attr:`TransformersBackend.processor` and
:func:`coda.inference.encoding.build_model_inputs` (the prompt encoding this backend runs) so it
tokenizes exactly like the service.

* ``chat`` draws ``n`` samples with ONE ``generate`` (``num_return_sequences=n``);
  ``chat_batch`` runs several prompts in one left-padded batch.
* Images shared by the prompts of one batch (the executor's G thoughts on ONE screenshot, or
  history screenshots they have in common) are decoded, preprocessed and run through the
  vision tower once; their features are handed to ``generate`` (``mm_encoder_outputs``) for
  every placeholder that shows them. Processors/models without that support take the plain
  path (one processor call over all images).
* ``continue_final_message`` renders the template without a generation prompt and continues
  the last assistant message (the executor's pre-fill), like vLLM's option of that name.
* LoRA adapters (peft, through transformers' PEFT integration) are loaded under their
  version; ``GenerateOptions.adapter`` selects one, ``None`` runs the base model.
* ``generate`` runs in a worker thread under a lock, so the event loop stays responsive;
  ``GenerateOptions.cancel`` (a ``threading.Event``) stops it at the next token.
* A prompt that with ``max_tokens`` does not fit the model's context raises
  :class:`~coda.inference.base.PromptTooLong` before anything is generated.
* Temperatures below :data:`~coda.inference.base.GREEDY_BELOW` decode greedily.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import inspect
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForImageTextToText,
    AutoProcessor,
    GenerationConfig,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.modeling_outputs import BaseModelOutputWithPooling

from coda.inference.base import (
    AdapterInvalid,
    AdapterNotFound,
    BackendError,
    ChatMessage,
    Completion,
    GenerateOptions,
    PromptTooLong,
    is_greedy,
)
from coda.inference.encoding import (
    DEFAULT_MAX_PIXELS,
    EncodedPrompts,
    encode_prompts,
    prepare_prompts,
    processor_inputs,
    shares_images,
)
from coda.logging import get_logger

log = get_logger(__name__)


# --- decoding (pure) ------------------------------------------------------------------------


def _eos_ids(generation_config: GenerationConfig) -> set[int]:
    eos = generation_config.eos_token_id
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def sampled_logprobs(logits: Any, sequences: Any, temperature: float) -> list[list[float]]:
    """Per row, the log-probability of each generated token under the sampling distribution:
    ``log_softmax(logits / temperature)`` (temperature 1 for greedy decoding), before top-p;
    ``logits`` is ``generate``'s per-step tuple of raw (batch, vocab) scores."""
    scale = 1.0 if is_greedy(temperature) else temperature
    steps = torch.stack([step.float() for step in logits], dim=1) / scale  # (batch, T, vocab)
    chosen = sequences[:, : steps.shape[1]].unsqueeze(-1)
    return torch.log_softmax(steps, dim=-1).gather(-1, chosen).squeeze(-1).tolist()


def completion_length(
    tokens: Sequence[int], eos_ids: set[int], pad_id: int | None
) -> tuple[int, bool]:
    """(generated token count incl. the EOS, whether an EOS ended it); trailing pads excluded."""
    for idx, tok in enumerate(tokens):
        if tok in eos_ids:
            return idx + 1, True
    end = len(tokens)
    if pad_id is not None:
        while end > 0 and tokens[end - 1] == pad_id:
            end -= 1
    return end, False


def apply_stop(text: str, stop: Sequence[str] | None) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string (excluded), as OpenAI servers do."""
    cuts = [i for i in (text.find(s) for s in stop or () if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


# --- the backend ----------------------------------------------------------------------------


def _resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.float32 if device == "cpu" else "auto"
    if dtype == "auto":
        return "auto"
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"dtype: unknown torch dtype {dtype!r}")
    return resolved


def _takes_features(model: Any) -> bool:
    """Whether ``generate`` accepts pre-computed image features (``mm_encoder_outputs``)."""
    forward = getattr(model, "forward", None)
    return (
        callable(getattr(model, "get_image_features", None)) and forward is not None
        and "mm_encoder_outputs" in inspect.signature(forward).parameters
    )


def _adapter_key(version: str) -> str:
    """peft adapter names become module keys: no dots or other punctuation; a short hash keeps
    versions apart that differ only in punctuation ("a.b" and "a_b")."""
    digest = hashlib.sha256(version.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"v_{re.sub(r'[^0-9A-Za-z_]', '_', version)[:64]}_{digest}"


class CancelCriteria(StoppingCriteria):
    """Stops ``generate`` for every sequence once ``event`` is set (the caller is gone)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        done = torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool,
                          device=input_ids.device)
        return done  # type: ignore[return-value]


def text_chars(conversations: Sequence[Sequence[ChatMessage]]) -> int:
    """Characters of text in the conversations (their image parts not counted)."""
    total = 0
    for messages in conversations:
        for message in messages:
            content = message.get("content")
            if isinstance(content, str):
                total += len(content)
            elif isinstance(content, list):
                total += sum(len(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    return total


class TransformersBackend:
    """A :class:`~coda.inference.base.ChatBackend` running a VLM in this process."""

    name = "transformers"

    def __init__(
        self,
        model_path: str | Path,
        device: str = "cpu",
        dtype: str | torch.dtype | None = None,
        max_pixels: int | None = DEFAULT_MAX_PIXELS,
        share_images: bool = True,
        context_tokens: int | None = None,
    ) -> None:
        self.model_path = str(model_path)
        self.device = device
        self.max_pixels = max_pixels
        self.processor: Any = AutoProcessor.from_pretrained(self.model_path)
        model: Any = AutoModelForImageTextToText.from_pretrained(
            self.model_path, dtype=_resolve_dtype(dtype, device)
        )
        self.model: Any = model.to(device).eval()
        self.share_images = share_images and shares_images(self.processor) and _takes_features(
            self.model)
        """Encode each distinct image of a batch once (see the module docstring)."""
        self._lock = threading.Lock()
        self._adapters: dict[str, str] = {}
        self._keys: dict[str, str] = {}
        text_config = getattr(self.model.config, "text_config", self.model.config)
        self.context_tokens: int = int(
            context_tokens or getattr(text_config, "max_position_embeddings", 0) or 32768)
        """Positions of the model: prompt + max_tokens must fit."""
        vocab = self.processor.tokenizer.get_vocab()
        self.max_token_chars = max((len(t) for t in vocab), default=1) or 1
        """The longest token's text: a prompt of more characters than ``context_tokens`` times
        this cannot fit, whatever it tokenizes to, and is refused without tokenizing it."""
        log.info("inference.transformers_loaded", model=self.model_path, device=device,
                 context_tokens=self.context_tokens)

    # -- generation --

    async def chat(self, messages: list[ChatMessage], options: GenerateOptions) -> list[Completion]:
        """``options.n`` completions of one conversation from one batched ``generate``."""
        return (await self.chat_batch([messages], options))[0]

    async def chat_batch(
        self, conversations: list[list[ChatMessage]], options: GenerateOptions
    ) -> list[list[Completion]]:
        """``options.n`` completions for each conversation, all in one padded ``generate``."""
        if not conversations:
            return []
        if options.n < 1:
            raise ValueError(f"n: must be >= 1, got {options.n}")
        return await asyncio.to_thread(self._generate, conversations, options)

    def _generation_config(self, options: GenerateOptions) -> GenerationConfig:
        config = copy.deepcopy(self.model.generation_config)
        config.max_new_tokens = options.max_tokens
        config.do_sample = not is_greedy(options.temperature)
        # Greedy samples are identical: generate one and repeat it (generate refuses n > 1).
        config.num_return_sequences = options.n if config.do_sample else 1
        if config.do_sample:
            config.temperature = options.temperature
            config.top_p = options.top_p
            # Sampling is temperature and top-p only, as the request says: no implicit top-k
            # (transformers' default 50, or a model's generation_config) and no other warper of
            # the model's config, so top_p=1 samples the distribution the log-probs describe.
            config.top_k, config.typical_p, config.min_p = 0, 1.0, None
            config.repetition_penalty, config.no_repeat_ngram_size = 1.0, 0
            config.epsilon_cutoff, config.eta_cutoff = 0.0, 0.0
        else:
            config.temperature, config.top_p, config.top_k = None, None, None
        if options.stop:
            config.stop_strings = list(options.stop)
        if config.pad_token_id is None:
            config.pad_token_id = self.processor.tokenizer.pad_token_id
        return config

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        """Raise :class:`PromptTooLong` unless ``prompt_tokens + max_tokens`` fit the context."""
        if prompt_tokens + max_tokens > self.context_tokens:
            raise PromptTooLong(prompt_tokens, max_tokens, self.context_tokens)

    def _generate(
        self, conversations: list[list[ChatMessage]], options: GenerateOptions
    ) -> list[list[Completion]]:
        chars = text_chars(conversations)
        if chars > self.context_tokens * self.max_token_chars:  # surely too long: skip tokenizing
            self.check_fits(chars // self.max_token_chars, options.max_tokens)
        batch = prepare_prompts(
            self.processor, conversations,
            continue_final_message=options.continue_final_message, max_pixels=self.max_pixels,
        )
        encoded: EncodedPrompts | None = None
        if self.share_images:
            encoded = encode_prompts(self.processor, batch)
            inputs = encoded.text.to(self.device)
        else:
            inputs = processor_inputs(self.processor, batch).to(self.device)
        config = self._generation_config(options)
        prompt_len = int(inputs["input_ids"].shape[1])
        self.check_fits(prompt_len, options.max_tokens)
        stopping = StoppingCriteriaList(
            [CancelCriteria(options.cancel)] if options.cancel is not None else [])
        with self._lock:
            if options.cancel is not None and options.cancel.is_set():
                raise BackendError("generation cancelled: the caller is gone")
            if options.seed is not None:
                torch.manual_seed(options.seed)
            with torch.inference_mode(), self._adapter_scope(options.adapter):
                extra = {} if encoded is None else self.image_encoder_outputs(encoded)
                output = self.model.generate(
                    **inputs, **extra, generation_config=config,
                    tokenizer=self.processor.tokenizer, stopping_criteria=stopping,
                    output_logits=options.logprobs, return_dict_in_generate=True,
                )
        prompt_tokens = inputs["attention_mask"].sum(dim=1).tolist()
        sequences = output.sequences[:, prompt_len:]
        new_tokens = sequences.tolist()
        token_logprobs = (sampled_logprobs(output.logits, sequences, options.temperature)
                          if options.logprobs else None)
        eos_ids, pad_id = _eos_ids(config), config.pad_token_id
        per_prompt = config.num_return_sequences
        results: list[list[Completion]] = []
        for k in range(len(conversations)):
            group = []
            first = k * per_prompt
            rows = new_tokens[first : first + per_prompt]
            for j, row in enumerate(rows * (options.n // per_prompt)):
                count, ended = completion_length(row, eos_ids, pad_id)
                ids = lps = None
                if token_logprobs is not None:
                    ids = tuple(row[:count])
                    lps = tuple(token_logprobs[first + j % per_prompt][:count])
                body = row[: count - 1] if ended else row[:count]
                text = self.processor.tokenizer.decode(body, skip_special_tokens=True)
                text, stopped = apply_stop(text, options.stop)
                group.append(Completion(
                    text=text, prompt_tokens=int(prompt_tokens[k]), completion_tokens=count,
                    finish_reason="stop" if ended or stopped else "length",
                    adapter=options.adapter, token_ids=ids, logprobs=lps,
                ))
            results.append(group)
        return results

    def image_encoder_outputs(self, encoded: EncodedPrompts) -> dict[str, Any]:
        """``mm_encoder_outputs`` for ``generate``: the vision tower runs on each distinct image
        once and every placeholder gets its image's features (empty without images)."""
        if encoded.pixel_values is None or encoded.image_grid_thw is None:
            return {}
        features = self.model.get_image_features(
            encoded.pixel_values.to(self.device), encoded.image_grid_thw.to(self.device),
            return_dict=True,
        ).pooler_output
        # one tensor per image, as get_image_features itself returns (torch.split)
        per_placeholder: Any = tuple(features[i] for i in encoded.image_index)
        return {"mm_encoder_outputs": {"image": BaseModelOutputWithPooling(
            pooler_output=per_placeholder)}}

    @contextmanager
    def _adapter_scope(self, adapter: str | None) -> Iterator[None]:
        """Select ``adapter`` for one generate call; ``None`` disables all adapters."""
        if adapter is None:
            if not self._adapters:
                yield
                return
            self.model.disable_adapters()
            try:
                yield
            finally:
                self.model.enable_adapters()
            return
        key = self._keys.get(adapter)
        if key is None:
            raise BackendError(f"adapter: {adapter!r} is not loaded (loaded: {sorted(self._keys)})")
        self.model.set_adapter(key)
        yield

    # -- adapters --

    async def load_adapter(self, version: str, path: str) -> None:
        """Load a peft LoRA adapter from ``path`` under ``version`` (reloads if present)."""
        await asyncio.to_thread(self._load_adapter, version, path)

    def _load_adapter(self, version: str, path: str) -> None:
        if not Path(path, "adapter_config.json").is_file():
            raise AdapterNotFound("no adapter_config.json in the adapter directory")
        key = _adapter_key(version)
        with self._lock:
            if version in self._keys:
                self.model.delete_adapter(self._keys.pop(version))
                self._adapters.pop(version, None)
            try:
                self.model.load_adapter(path, adapter_name=key)
            except Exception as exc:  # peft raises many types for a bad adapter
                self._forget_partial(key)
                raise AdapterInvalid(f"not a LoRA adapter of this model: "
                                     f"{type(exc).__name__}: {str(exc)[:300]}") from exc
            self._keys[version] = key
            self._adapters[version] = path
        log.info("inference.adapter_loaded", version=version, path=path)

    def _forget_partial(self, key: str) -> None:
        """Remove whatever a failed ``load_adapter`` left registered under ``key``."""
        config = getattr(self.model, "peft_config", None) or {}
        if key in config:
            try:
                self.model.delete_adapter(key)
            except Exception as exc:  # noqa: BLE001 - cleanup after a failed load: logged
                log.warning("inference.adapter_cleanup_failed", key=key, error=str(exc)[:200])

    async def unload_adapter(self, version: str) -> None:
        """Delete the adapter ``version``; unknown versions are ignored."""
        await asyncio.to_thread(self._unload_adapter, version)

    def _unload_adapter(self, version: str) -> None:
        with self._lock:
            key = self._keys.pop(version, None)
            self._adapters.pop(version, None)
            if key is not None:
                self.model.delete_adapter(key)
        log.info("inference.adapter_unloaded", version=version, known=key is not None)

    def adapters(self) -> dict[str, str]:
        return dict(self._adapters)

    async def ready(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model_path, "device": self.device,
                "adapters": sorted(self._adapters)}

    async def aclose(self) -> None:
        return None
