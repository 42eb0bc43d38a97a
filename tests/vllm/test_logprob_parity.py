"""Log-prob parity, which truncated importance sampling rests on: for plans sampled by vLLM
(float32 weights, temperature 1), the trainer's own log-probs of the same token ids under the
same weights, per token."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.serving import logprob_parity, make_state
from coda.inference.openai_compat import OpenAICompatBackend
from tests.vllm.conftest import SERVED_NAME

pytestmark = pytest.mark.vllm

MEAN_BOUND = 1e-3
"""Measured here: mean |difference| ~1e-6 .. 1e-5 (float32 on both sides, different kernels)."""


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_trainer_logprobs_match_vllms(vllm_url: str, tiny_model_dir: Path,
                                            tmp_path: Path, temperature: float) -> None:
    """At temperature 0.7 too: the planner's server returns processed log-probs (after
    temperature, ``--logprobs-mode processed_logprobs``), the trainer takes logits / T."""
    state = make_state(tmp_path / "store", (112, 84))
    backend = OpenAICompatBackend(f"{vllm_url}/v1", model=SERVED_NAME, retries=0, timeout=120)
    try:
        parity = await logprob_parity(backend, tiny_model_dir, tmp_path / "store", state, g=4,
                                      max_tokens=8, groups=2, temperature=temperature)
    finally:
        await backend.aclose()
    assert parity.groups == 2 and parity.tokens >= 2
    assert parity.mean_abs_diff < MEAN_BOUND, parity
    assert parity.max_abs_diff < 50 * MEAN_BOUND, parity
