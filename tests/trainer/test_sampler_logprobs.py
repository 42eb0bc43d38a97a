"""The planner service's own sampling log-probabilities (``return_logprobs``) are what the
trainer computes for the same tokens: with no version lag the importance weights are 1."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from coda.clients.planner import PlannerClient
from coda.inference.encoding import ensure_processor_workaround
from tests.fixtures.services import TOKENS
from tests.trainer.conftest import MAX_PIXELS, make_state, sample_group, store_screens
from trainer.data import GroupDataError, PromptOptions, artifact_reader, encode_group
from trainer.logprobs import shared_logprobs


async def test_service_logprobs_equal_the_trainers(planner_process, artifacts_dir: Path,  # type: ignore[no-untyped-def]
                                                   tiny_model_dir: Path) -> None:
    state = make_state(*store_screens(artifacts_dir))
    ensure_processor_workaround()
    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir).eval()
    reader = artifact_reader(f"file://{artifacts_dir}")
    async with PlannerClient(planner_process.url, token=TOKENS.inference) as planner:
        for seed in range(20):  # the random model may sample image placeholders: next seed
            group = await sample_group(planner, state, n=4, seed=seed, max_tokens=6,
                                       logprobs=True)
            try:
                enc = encode_group(processor, group, reader, PromptOptions(max_pixels=MAX_PIXELS))
                break
            except GroupDataError:
                continue
        else:
            raise AssertionError("no usable group in 20 seeds")
    for cand in group.candidates:
        assert cand.token_ids and cand.logprobs and len(cand.token_ids) == len(cand.logprobs)
        assert all(lp <= 0 for lp in cand.logprobs)
    with torch.no_grad():
        mine = shared_logprobs(model, enc, 1.0)
    sampler = enc.padded_sampler_logprobs()
    assert sampler is not None
    assert torch.allclose(mine * enc.mask(), sampler, atol=1e-3)
