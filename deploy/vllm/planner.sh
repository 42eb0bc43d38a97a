#!/usr/bin/env bash
# Serve the CODA planner (cerebrum) with vLLM's OpenAI-compatible server.
#
# LoRA adapters written by the trainer are loaded at run time by the planner service
# (POST /v1/load_lora_adapter), so runtime LoRA updating is on; a request picks an adapter by
# its version name in `model`. The adapter directory must be visible to this server at the same
# path the planner service passes (CODA_PLANNER_ADAPTER_CACHE_DIR / the registered URI).
#
# Settings: CODA_VLLM_PLANNER_* (see common.sh) plus MAX_LORA_RANK, MAX_LORAS, MAX_CPU_LORAS;
# extra arguments go to `vllm serve` unchanged:
#   CODA_VLLM_PLANNER_TP=2 deploy/vllm/planner.sh --enforce-eager
# --logprobs-mode processed_logprobs: the log-probs returned with each plan are those of the
# distribution sampled from (after temperature), which the trainer's truncated importance
# sampling divides by (trainer/grpo/losses.py); vLLM's default, raw_logprobs, is before temperature.
# The paper served OpenIXCLab/CODA-PLANNER-TARS-32B with vLLM 0.8.5.post1, tensor parallel 4.
set -euo pipefail
source "$(dirname "$0")/common.sh"

export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
# image limit 5: the current screenshot + history (keep_images) + previous
coda_vllm_serve PLANNER OpenIXCLab/CODA-PLANNER-TARS-32B 4 '{"image":5}' 32768 \
  --enable-lora \
  --max-lora-rank "${CODA_VLLM_PLANNER_MAX_LORA_RANK:-64}" \
  --max-loras "${CODA_VLLM_PLANNER_MAX_LORAS:-4}" \
  --max-cpu-loras "${CODA_VLLM_PLANNER_MAX_CPU_LORAS:-16}" \
  --logprobs-mode processed_logprobs \
  -- "$@"
