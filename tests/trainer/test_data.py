"""A group becomes exactly the planner service's input; the shared prompt encoding gives the
log-probs of encoding each plan separately and of the model's own sampling."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from coda.artifacts import ArtifactStore
from coda.contracts.services_api import HistoryStep, ImageRef, PlanRequest
from coda.contracts.training import Candidate, Group, StateRef
from coda.inference.encoding import build_model_inputs, ensure_processor_workaround
from planner_service.app import PlannerState, build_messages
from planner_service.settings import PlannerSettings
from tests.fixtures.images import image_bytes
from tests.trainer.conftest import CLICK, INSTRUCTION, SCREEN
from trainer.data import (
    GroupDataError,
    PromptOptions,
    artifact_reader,
    encode_group,
    planner_messages,
)
from trainer.logprobs import separate_logprobs, shared_logprobs


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trainer-artifacts")


@pytest.fixture(scope="module")
def keys(store_dir: Path) -> list[str]:
    store = ArtifactStore(f"file://{store_dir}")
    return [store.put(image_bytes(SCREEN, c), "image/png")
            for c in ((200, 30, 30), (20, 90, 200), (9, 9, 9))]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> tuple[Any, Any]:
    ensure_processor_workaround()
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir).eval()
    return processor, model


def state_with_history(keys: list[str], steps: int, *, inline: Path | None = None) -> StateRef:
    """A state after ``steps`` past steps; their screenshots are store keys, or with
    ``inline`` (the store's folder) the images themselves."""
    def image(key: str) -> ImageRef:
        if inline is None:
            return ImageRef(ref=key)
        data = (inline / key).read_bytes()
        return ImageRef(b64="data:image/png;base64," + base64.b64encode(data).decode())

    history = [HistoryStep(thought=f"Thought: step {i}\nAction: click", action_text="click()",
                           screenshot=image(keys[i % 2])) for i in range(steps)]
    return StateRef(step_index=steps, instruction=INSTRUCTION, app="demo", screenshot=keys[2],
                    screen_width=112, screen_height=84,
                    previous_screenshot=keys[(steps - 1) % 2] if steps else None,
                    history=history)


def plan_request(state: StateRef) -> PlanRequest:
    return PlanRequest(
        instruction=state.instruction, screenshot=ImageRef(ref=state.screenshot),
        previous_screenshot=ImageRef(ref=state.previous_screenshot)
        if state.previous_screenshot else None,
        history=state.history)  # one shape: the stored history is the request's


@pytest.mark.parametrize(("steps", "max_turns", "keep_images", "inline"), [
    (0, 15, 1, False), (1, 15, 1, False), (4, 15, 2, False), (20, 15, 1, False),
    (3, 2, 0, False), (3, 0, 1, False), (4, 15, 2, True)])
async def test_the_trainer_builds_the_planner_service_input(
        store_dir: Path, keys: list[str], steps: int, max_turns: int, keep_images: int,
        inline: bool) -> None:
    state = state_with_history(keys, steps, inline=store_dir if inline else None)
    settings = PlannerSettings(artifacts_url=f"file://{store_dir}", max_turns=max_turns,
                               keep_images=keep_images)
    service = await build_messages(plan_request(state),
                                   PlannerState(settings))
    mine = planner_messages(state, artifact_reader(f"file://{store_dir}"),
                            PromptOptions(max_turns=max_turns, keep_images=keep_images))
    assert mine == service


def group_of(keys: list[str], plans: list[str], **extra: Any) -> Group:
    cands = [Candidate(plan=p, reward=i / len(plans), **extra) for i, p in enumerate(plans)]
    return Group(state=state_with_history(keys, 2), target=CLICK, candidates=cands)


def test_shared_prompt_encoding_equals_separate_encoding(tiny: tuple[Any, Any], store_dir: Path,
                                                         keys: list[str]) -> None:
    processor, model = tiny
    group = group_of(keys, ["Thought: click the File menu", "abc", "type hello world now", "x"])
    enc = encode_group(processor, group, artifact_reader(f"file://{store_dir}"),
                       PromptOptions(max_pixels=112 * 112))
    # the prompt is the service's encoding of the service's messages
    messages = planner_messages(group.state, artifact_reader(f"file://{store_dir}"))
    ref = build_model_inputs(processor, [messages], max_pixels=112 * 112)
    assert torch.equal(enc.prompt["input_ids"], ref["input_ids"])
    assert int((enc.prompt["input_ids"] == processor.image_token_id).sum()) > 0
    with torch.no_grad():
        shared, separate = shared_logprobs(model, enc), separate_logprobs(model, enc)
    assert shared.shape == (4, max(enc.lengths))
    assert torch.allclose(shared, separate, atol=1e-5)
    # the gradient flows through the shared prompt too (LoRA changes the prompt's keys/values)
    model.zero_grad()
    shared_logprobs(model, enc).sum().backward()
    embed = model.get_input_embeddings().weight.grad
    assert embed is not None
    prompt_rows = enc.prompt["input_ids"][0].unique()
    assert float(embed[prompt_rows].abs().sum()) > 0
    model.zero_grad()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_equal_the_models_own_sampling_scores(tiny: tuple[Any, Any], store_dir: Path,
                                                        keys: list[str],
                                                        temperature: float) -> None:
    """Sampler log-probs filled from ``generate`` (no top-p) are what the trainer computes for
    the same token ids at the same temperature: the importance weights start at exactly 1."""
    processor, model = tiny
    state = state_with_history(keys, 1)
    messages = planner_messages(state, artifact_reader(f"file://{store_dir}"))
    inputs = build_model_inputs(processor, [messages], max_pixels=112 * 112)
    torch.manual_seed(3)
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                             max_new_tokens=6, num_return_sequences=3, output_scores=True,
                             return_dict_in_generate=True,
                             pad_token_id=processor.tokenizer.pad_token_id)
    p_len = inputs["input_ids"].shape[1]
    scores = torch.stack(out.scores, dim=1).log_softmax(-1)  # [3, T, V]
    eos = processor.tokenizer.convert_tokens_to_ids(processor.tokenizer.eos_token)
    cands = []
    for i, row in enumerate(out.sequences[:, p_len:].tolist()):
        ids = row[:row.index(eos) + 1] if eos in row else row
        lps = [float(scores[i, t, tok]) for t, tok in enumerate(ids)]
        cands.append(Candidate(plan="x", reward=i / 3, token_ids=ids, logprobs=lps))
    group = Group(state=state, target=CLICK, candidates=cands)
    enc = encode_group(processor, group, artifact_reader(f"file://{store_dir}"),
                       PromptOptions(max_pixels=112 * 112))
    with torch.no_grad():
        mine = shared_logprobs(model, enc, temperature)
    sampler = enc.padded_sampler_logprobs()
    assert sampler is not None
    assert torch.allclose(mine * enc.mask(), sampler, atol=1e-4)


def test_unusable_groups_are_refused_with_the_reason(tiny: tuple[Any, Any], store_dir: Path,
                                                     keys: list[str]) -> None:
    processor, _ = tiny
    read = artifact_reader(f"file://{store_dir}")
    missing = group_of(keys, ["a", "b"])
    missing.state.screenshot = "sha256/00/" + "0" * 64 + ".png"
    with pytest.raises(GroupDataError, match="screenshot"):
        encode_group(processor, missing, read)
    image_pad = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    with pytest.raises(GroupDataError, match="placeholder"):
        encode_group(processor, group_of(keys, ["a"], token_ids=[5, image_pad, 2]), read)


def test_gradient_checkpointing_gives_the_same_gradients(tiny_model_dir: Path, store_dir: Path,
                                                         keys: list[str]) -> None:
    from trainer.config import TrainerConfig
    from trainer.policy import load_policy

    grads = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        cfg = TrainerConfig(model=str(tiny_model_dir), device="cpu", lora_rank=4,
                            gradient_checkpointing=checkpointing)
        policy = load_policy(cfg)
        policy.model.train()
        group = group_of(keys, ["Thought: click the File menu", "abc"])
        enc = encode_group(policy.processor, group, artifact_reader(f"file://{store_dir}"),
                           PromptOptions(max_pixels=112 * 112))
        (shared_logprobs(policy.model, enc) * torch.tensor([[1.0], [-1.0]])).sum().backward()
        grads.append({n: p.grad.clone() for n, p in policy.model.named_parameters()
                      if p.requires_grad and p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-6), name
