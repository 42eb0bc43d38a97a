#!/usr/bin/env bash
# Serve the CODA planner (cerebrum) with vLLM's OpenAI-compatible server.
#
# LoRA adapters written by the trainer are loaded at run time by the planner service
# (POST /v1/load_lora_adapter), so runtime LoRA updating is on; a request picks an adapter by
# its version name in `model`. The adapter directory must be visible to this server at the same
# path the planner service passes (CODA_PLANNER_ADAPTER_CACHE_DIR / the registered URI).
#
# Every setting comes from the environment; extra arguments go to `vllm serve` unchanged:
#   CODA_VLLM_PLANNER_TP=2 deploy/vllm/planner.sh --enforce-eager
# The paper served OpenIXCLab/CODA-PLANNER-TARS-32B with vLLM 0.8.5.post1, tensor parallel 4.
# vLLM < 0.9 wants the multimodal limit as `image=5` instead of JSON.
set -euo pipefail

MODEL="${CODA_VLLM_PLANNER_MODEL:-OpenIXCLab/CODA-PLANNER-TARS-32B}"
SERVED_NAME="${CODA_VLLM_PLANNER_SERVED_NAME:-${MODEL}}"
HOST="${CODA_VLLM_PLANNER_HOST:-0.0.0.0}"
PORT="${CODA_VLLM_PLANNER_PORT:-8000}"
TP="${CODA_VLLM_PLANNER_TP:-4}"
MAX_LORA_RANK="${CODA_VLLM_PLANNER_MAX_LORA_RANK:-64}"
MAX_LORAS="${CODA_VLLM_PLANNER_MAX_LORAS:-4}"
MAX_CPU_LORAS="${CODA_VLLM_PLANNER_MAX_CPU_LORAS:-16}"
DEFAULT_LIMIT_MM='{"image":5}'  # the current screenshot + history (keep_images) + previous
LIMIT_MM="${CODA_VLLM_PLANNER_LIMIT_MM:-${DEFAULT_LIMIT_MM}}"
MAX_MODEL_LEN="${CODA_VLLM_PLANNER_MAX_MODEL_LEN:-32768}"
GPU_MEMORY="${CODA_VLLM_PLANNER_GPU_MEMORY:-0.90}"
DTYPE="${CODA_VLLM_PLANNER_DTYPE:-bfloat16}"

export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True

args=(
  serve "${MODEL}"
  --served-model-name "${SERVED_NAME}"
  --host "${HOST}" --port "${PORT}"
  --tensor-parallel-size "${TP}"
  --dtype "${DTYPE}"
  --max-model-len "${MAX_MODEL_LEN}"
  --gpu-memory-utilization "${GPU_MEMORY}"
  --limit-mm-per-prompt "${LIMIT_MM}"
  --enable-lora
  --max-lora-rank "${MAX_LORA_RANK}"
  --max-loras "${MAX_LORAS}"
  --max-cpu-loras "${MAX_CPU_LORAS}"
)
if [[ -n "${CODA_VLLM_API_KEY:-}" ]]; then
  args+=(--api-key "${CODA_VLLM_API_KEY}")
fi

echo "vllm ${args[*]} $*" >&2
exec "${CODA_VLLM_BIN:-vllm}" "${args[@]}" "$@"
