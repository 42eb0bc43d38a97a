"""The in-process backend on the tiny random Qwen2.5-VL (real model, real peft LoRA)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
import torch
from PIL import Image

from coda.inference.base import (
    AdapterInvalid,
    AdapterNotFound,
    BackendError,
    ChatBackend,
    ChatMessage,
    GenerateOptions,
    PromptTooLong,
)
from coda.inference.encoding import (
    build_model_inputs,
    encode_prompts,
    ensure_processor_workaround,
    prepare_prompts,
    to_processor_messages,
)
from coda.inference.images import image_part
from coda.inference.transformers_local import TransformersBackend, apply_stop, completion_length

PREFILL = "Thought: click the File menu\nAction: "


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> TransformersBackend:
    return TransformersBackend(tiny_model_dir, max_pixels=320 * 200)


@pytest.fixture(scope="module")
def plain_backend(tiny_model_dir: Path) -> TransformersBackend:
    """The same model without image sharing: one processor call and vision pass per image."""
    return TransformersBackend(tiny_model_dir, max_pixels=320 * 200, share_images=False)


def _screenshot(color: tuple[int, int, int] = (200, 30, 30)) -> ChatMessage:
    return image_part(Image.new("RGB", (320, 200), color))


def _user(text: str, *images: ChatMessage) -> ChatMessage:
    return {"role": "user", "content": [*images, {"type": "text", "text": text}]}


def _prefilled() -> list[ChatMessage]:
    return [_user("Do it", _screenshot()), {"role": "assistant", "content": PREFILL}]


def _greedy(max_tokens: int = 8, **kwargs: object) -> GenerateOptions:
    return GenerateOptions(temperature=0.0, max_tokens=max_tokens, **kwargs)  # type: ignore[arg-type]


def test_workaround_is_idempotent() -> None:
    assert ensure_processor_workaround() == ensure_processor_workaround()


def test_backend_meets_the_contract(backend: TransformersBackend) -> None:
    assert isinstance(backend, ChatBackend)
    assert backend.model is not None and backend.processor is not None


async def test_n_samples_in_one_call(backend: TransformersBackend) -> None:
    options = GenerateOptions(n=4, temperature=1.0, top_p=0.9, max_tokens=8, seed=7)
    completions = await backend.chat([_user("What next?", _screenshot())], options)
    assert len(completions) == 4
    for c in completions:
        assert c.prompt_tokens > 0
        assert 1 <= c.completion_tokens <= 8
        assert c.finish_reason in ("stop", "length")
        assert c.adapter is None
    again = await backend.chat([_user("What next?", _screenshot())], options)
    assert [c.text for c in again] == [c.text for c in completions]  # same seed, same samples


async def test_sampling_logprobs_when_asked(backend: TransformersBackend) -> None:
    messages = [_user("What next?", _screenshot())]
    options = GenerateOptions(n=3, temperature=0.8, top_p=0.9, max_tokens=6, seed=5)
    plain = await backend.chat(messages, options)
    assert all(c.token_ids is None and c.logprobs is None for c in plain)
    scored = await backend.chat(messages, GenerateOptions(**{**options.__dict__, "logprobs": True}))
    assert [c.text for c in scored] == [c.text for c in plain]  # asking changes no sample
    for c in scored:
        assert c.token_ids is not None and c.logprobs is not None
        assert len(c.token_ids) == len(c.logprobs) == c.completion_tokens
        assert all(lp <= 0 for lp in c.logprobs)
    greedy = await backend.chat(messages, _greedy(n=2, logprobs=True))
    assert greedy[0].logprobs == greedy[1].logprobs


def test_sampling_is_temperature_and_top_p_only(backend: TransformersBackend,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """No implicit top-k (transformers' default 50) nor a warper of the model's own generation
    config: with top_p=1 the samples follow the distribution the log-probs describe."""
    model_config = backend.model.generation_config
    for name, value in (("top_k", 1), ("repetition_penalty", 1.3), ("min_p", 0.2),
                        ("typical_p", 0.5), ("no_repeat_ngram_size", 2)):
        monkeypatch.setattr(model_config, name, value)
    config = backend._generation_config(GenerateOptions(temperature=1.0, top_p=1.0))
    assert config.do_sample and config.top_p == 1.0 and not config.top_k
    assert config.repetition_penalty == 1.0 and config.typical_p == 1.0
    assert not config.min_p and not config.no_repeat_ngram_size
    assert model_config.top_k == 1  # the model's own config is left alone
    assert backend._generation_config(GenerateOptions(top_p=0.9)).top_p == 0.9


async def test_greedy_n_repeats_the_single_answer(backend: TransformersBackend) -> None:
    completions = await backend.chat([_user("hello")], _greedy(n=3))
    assert len(completions) == 3
    assert len({c.text for c in completions}) == 1


def test_continue_final_message_prompt_ends_with_prefill(backend: TransformersBackend) -> None:
    messages = _prefilled()
    inputs = build_model_inputs(backend.processor, [messages], continue_final_message=True)
    prompt = backend.processor.tokenizer.decode(inputs["input_ids"][0])
    assert prompt.endswith(PREFILL)
    assert prompt.count("<|im_start|>assistant") == 1
    opened = build_model_inputs(backend.processor, [messages])
    opened_prompt = backend.processor.tokenizer.decode(opened["input_ids"][0])
    assert opened_prompt.endswith(f"{PREFILL}<|im_end|>\n<|im_start|>assistant\n")


async def test_continue_final_message_generation(backend: TransformersBackend) -> None:
    messages = _prefilled()
    inputs = build_model_inputs(backend.processor, [messages], continue_final_message=True,
                                max_pixels=backend.max_pixels)
    [cont] = await backend.chat(messages, _greedy(continue_final_message=True))
    [opened] = await backend.chat(messages, _greedy())
    assert cont.prompt_tokens == inputs["input_ids"].shape[1]
    assert cont.prompt_tokens < opened.prompt_tokens  # no closing <|im_end|>, no new turn
    assert cont.completion_tokens > 0
    with pytest.raises(ValueError, match=r"messages\[-1\]\.role"):
        await backend.chat([_user("no assistant turn")], _greedy(continue_final_message=True))


async def test_chat_batch_matches_single_prompts(backend: TransformersBackend) -> None:
    conversations: list[list[ChatMessage]] = [
        [_user("Open the File menu", _screenshot())],
        [_user("short")],
        [_user("Two screens", _screenshot((0, 0, 255)), _screenshot((0, 255, 0))),
         {"role": "assistant", "content": "Thought: ok"}, _user("and now?")],
    ]
    batched = await backend.chat_batch(conversations, _greedy(n=2))
    assert [len(group) for group in batched] == [2, 2, 2]
    for conversation, group in zip(conversations, batched, strict=True):
        [single] = await backend.chat(conversation, _greedy())
        assert group[0].text == single.text
        assert group[0].prompt_tokens == single.prompt_tokens
    assert len({group[0].prompt_tokens for group in batched}) == 3


def _shared_image_batch() -> list[list[ChatMessage]]:
    """The executor's shape (G thoughts on one screenshot, a shared history screenshot) plus a
    prompt with its own images, a PIL part with the screenshot's pixels and a text-only one."""
    shot, old = _screenshot(), _screenshot((10, 120, 60))
    history: list[ChatMessage] = [_user("step", old),
                                  {"role": "assistant", "content": "Thought: x"}]
    batch = [[*history, _user("Do it", shot), {"role": "assistant", "content": f"Thought: {t}"}]
             for t in ("click File", "press ctrl s", "scroll down")]
    pil: ChatMessage = {"type": "image", "image": Image.new("RGB", (320, 200), (200, 30, 30))}
    batch.append([_user("Two screens", _screenshot((0, 0, 255)), pil),
                  {"role": "assistant", "content": "Thought: ok"}])
    batch.append([_user("short"), {"role": "assistant", "content": "Thought: no image"}])
    return batch


def test_shared_images_are_prepared_once(backend: TransformersBackend) -> None:
    conversations = _shared_image_batch()
    batch = prepare_prompts(backend.processor, conversations, max_pixels=320 * 200)
    assert len(batch.images) == 3  # history shot, screenshot (also the PIL part), blue
    assert batch.image_index == [0, 1, 0, 1, 0, 1, 2, 1]
    encoded = encode_prompts(backend.processor, batch)
    assert encoded.image_grid_thw is not None and encoded.image_grid_thw.shape[0] == 3
    assert encoded.text["image_grid_thw"].shape[0] == 8
    for continue_final in (False, True):
        shared = build_model_inputs(backend.processor, conversations, max_pixels=320 * 200,
                                    continue_final_message=continue_final)
        plain = build_model_inputs(backend.processor, conversations, max_pixels=320 * 200,
                                   continue_final_message=continue_final, share_images=False)
        assert list(shared.keys()) == list(plain.keys())
        for key, value in plain.items():
            assert shared[key].dtype == value.dtype, key
            assert torch.equal(shared[key], value), key
    text_only = [[_user("hello")], [_user("a longer text-only prompt")]]
    shared = build_model_inputs(backend.processor, text_only)
    plain = build_model_inputs(backend.processor, text_only, share_images=False)
    assert list(shared.keys()) == list(plain.keys())
    assert all(torch.equal(shared[k], v) for k, v in plain.items())


async def test_shared_images_keep_greedy_outputs(
    backend: TransformersBackend, plain_backend: TransformersBackend
) -> None:
    assert backend.share_images and not plain_backend.share_images
    conversations = _shared_image_batch()
    options = _greedy(max_tokens=12, continue_final_message=True)
    assert await backend.chat_batch(conversations, options) == \
        await plain_backend.chat_batch(conversations, options)
    # token for token, straight from generate: the features of each distinct image computed
    # once versus the vision tower over every placeholder's pixels
    config = backend._generation_config(options)
    encoded = encode_prompts(backend.processor, prepare_prompts(
        backend.processor, conversations, continue_final_message=True, max_pixels=320 * 200))
    plain_inputs = build_model_inputs(backend.processor, conversations, share_images=False,
                                      continue_final_message=True, max_pixels=320 * 200)
    with torch.inference_mode():
        shared_out = backend.model.generate(**encoded.text,
                                            **backend.image_encoder_outputs(encoded),
                                            generation_config=config)
        plain_out = backend.model.generate(**plain_inputs, generation_config=config)
    assert torch.equal(shared_out, plain_out)


async def test_adapter_lifecycle(backend: TransformersBackend, tiny_lora_dir: Path) -> None:
    messages = [_user("What next?", _screenshot())]
    [base] = await backend.chat(messages, _greedy())
    await backend.load_adapter("planner-v1.0", str(tiny_lora_dir))
    assert backend.adapters() == {"planner-v1.0": str(tiny_lora_dir)}
    tuned = await backend.chat(messages, _greedy(n=2, adapter="planner-v1.0"))
    assert [c.adapter for c in tuned] == ["planner-v1.0", "planner-v1.0"]
    assert tuned[0].text != base.text
    [base_again] = await backend.chat(messages, _greedy())
    assert base_again.text == base.text and base_again.adapter is None
    await backend.unload_adapter("planner-v1.0")
    assert backend.adapters() == {}
    with pytest.raises(BackendError, match="not loaded"):
        await backend.chat(messages, _greedy(adapter="planner-v1.0"))
    [after] = await backend.chat(messages, _greedy())
    assert after.text == base.text


async def test_load_adapter_rejects_a_bad_path(
    backend: TransformersBackend, tmp_path: Path, tiny_lora_dir: Path
) -> None:
    with pytest.raises(AdapterNotFound, match=r"adapter_config\.json"):
        await backend.load_adapter("v9", str(tmp_path))
    broken = tmp_path / "broken"
    shutil.copytree(tiny_lora_dir, broken)
    for weights in broken.glob("adapter_model.*"):
        weights.write_bytes(b"not safetensors")
    with pytest.raises(AdapterInvalid):
        await backend.load_adapter("v9", str(broken))
    assert backend.adapters() == {}
    assert not any(k.startswith("v_v9") for k in (getattr(backend.model, "peft_config", None)
                                                     or {}))


async def test_versions_differing_in_punctuation_are_two_adapters(
    backend: TransformersBackend, tiny_lora_dir: Path
) -> None:
    await backend.load_adapter("a.b", str(tiny_lora_dir))
    await backend.load_adapter("a_b", str(tiny_lora_dir))
    try:
        assert set(backend.adapters()) == {"a.b", "a_b"}
    finally:
        await backend.unload_adapter("a.b")
        await backend.unload_adapter("a_b")


@pytest.mark.parametrize("temperature", [1e-300, 5e-324, 1e-5])
async def test_tiny_temperature_decodes_greedily(backend: TransformersBackend,
                                                 temperature: float) -> None:
    messages = _prefilled()
    [greedy] = await backend.chat(messages, _greedy(max_tokens=6))
    tiny = await backend.chat(messages, GenerateOptions(n=2, temperature=temperature,
                                                        max_tokens=6, seed=3))
    assert [c.text for c in tiny] == [greedy.text, greedy.text]


async def test_a_set_cancel_event_stops_generation(backend: TransformersBackend) -> None:
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    # greedy on this prompt never writes an EOS (thousands of tokens): only the event stops it
    options = GenerateOptions(temperature=0.0, max_tokens=20_000, cancel=cancel)
    [completion] = await backend.chat(_prefilled(), options)
    assert completion.finish_reason == "length"
    assert completion.completion_tokens < 20_000  # stopped long before max_tokens
    with pytest.raises(BackendError, match="cancelled"):
        await backend.chat(_prefilled(), options)  # already set: nothing is generated


async def test_prompt_beyond_the_context_is_refused(tiny_model_dir: Path) -> None:
    small = TransformersBackend(tiny_model_dir, max_pixels=56 * 56, context_tokens=512)
    long_text = [{"role": "user", "content": "click the File menu " * 200}]
    with pytest.raises(PromptTooLong) as info:
        await small.chat(long_text, _greedy(max_tokens=8))
    assert info.value.context == 512 and info.value.prompt_tokens > 512 - 8
    with pytest.raises(PromptTooLong):  # fits alone, not with max_tokens
        await small.chat([{"role": "user", "content": "hi"}], _greedy(max_tokens=510))
    huge = [{"role": "user", "content": "x" * (512 * small.max_token_chars + 1)}]
    with pytest.raises(PromptTooLong):  # refused without tokenizing
        await small.chat(huge, _greedy())
    [ok] = await small.chat([{"role": "user", "content": "hi"}], _greedy(max_tokens=4))
    assert ok.completion_tokens <= 4


def test_messages_conversion_and_pixel_bound(backend: TransformersBackend) -> None:
    big = image_part(Image.new("RGB", (1280, 800)))
    converted, images = to_processor_messages(
        [{"role": "system", "content": "sys"}, _user("look", big)], max_pixels=320 * 200
    )
    assert converted[0] == {"role": "system", "content": [{"type": "text", "text": "sys"}]}
    assert converted[1]["content"][0] == {"type": "image"}
    assert images[0].size == (320, 200)
    small = build_model_inputs(backend.processor, [[_user("look", big)]], max_pixels=320 * 200)
    full = build_model_inputs(backend.processor, [[_user("look", big)]], max_pixels=None)
    assert small["image_grid_thw"].prod() < full["image_grid_thw"].prod()


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"role": "tool", "content": "x"}, r"messages\[0\]\.role"),
        ({"role": "user", "content": [{"type": "audio"}]}, r"messages\[0\]\.content\[0\]\.type"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]},
         r"messages\[0\]\.content\[0\]\.image_url"),
    ],
)
def test_bad_messages_name_the_field(message: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        to_processor_messages([message])


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([5, 6, 2, 0, 0], (3, True)),
        ([5, 6, 7], (3, False)),
        ([5, 0, 0], (1, False)),
        ([2], (1, True)),
    ],
)
def test_completion_length(tokens: list[int], expected: tuple[int, bool]) -> None:
    assert completion_length(tokens, {2}, 0) == expected


def test_apply_stop() -> None:
    assert apply_stop("Thought: a\nAction: b", ["\nAction"]) == ("Thought: a", True)
    assert apply_stop("abc", ["x", "c", "b"]) == ("a", True)
    assert apply_stop("abc", None) == ("abc", False)
