#!/usr/bin/env bash
# Serve the CODA executor (cerebellum, frozen UI-TARS-1.5-7B) with vLLM's OpenAI-compatible
# server. The executor service pre-fills "Thought: ...\nAction: " and asks vLLM to continue it
# (continue_final_message), and sends at most history_n = 5 screenshots per request.
#
# Every setting comes from the environment; extra arguments go to `vllm serve` unchanged.
# The paper served ByteDance-Seed/UI-TARS-1.5-7B with vLLM 0.8.5.post1, tensor parallel 2.
# vLLM < 0.9 wants the multimodal limit as `image=5` instead of JSON.
set -euo pipefail

MODEL="${CODA_VLLM_EXECUTOR_MODEL:-ByteDance-Seed/UI-TARS-1.5-7B}"
SERVED_NAME="${CODA_VLLM_EXECUTOR_SERVED_NAME:-${MODEL}}"
HOST="${CODA_VLLM_EXECUTOR_HOST:-0.0.0.0}"
PORT="${CODA_VLLM_EXECUTOR_PORT:-8000}"
TP="${CODA_VLLM_EXECUTOR_TP:-2}"
DEFAULT_LIMIT_MM='{"image":5}'  # history_n of UI-TARS-1.5 (CODA_EXECUTOR_HISTORY_N)
LIMIT_MM="${CODA_VLLM_EXECUTOR_LIMIT_MM:-${DEFAULT_LIMIT_MM}}"
MAX_MODEL_LEN="${CODA_VLLM_EXECUTOR_MAX_MODEL_LEN:-32768}"
GPU_MEMORY="${CODA_VLLM_EXECUTOR_GPU_MEMORY:-0.90}"
DTYPE="${CODA_VLLM_EXECUTOR_DTYPE:-bfloat16}"

args=(
  serve "${MODEL}"
  --served-model-name "${SERVED_NAME}"
  --host "${HOST}" --port "${PORT}"
  --tensor-parallel-size "${TP}"
  --dtype "${DTYPE}"
  --max-model-len "${MAX_MODEL_LEN}"
  --gpu-memory-utilization "${GPU_MEMORY}"
  --limit-mm-per-prompt "${LIMIT_MM}"
)
if [[ -n "${CODA_VLLM_API_KEY:-}" ]]; then
  args+=(--api-key "${CODA_VLLM_API_KEY}")
fi

echo "vllm ${args[*]} $*" >&2
exec "${CODA_VLLM_BIN:-vllm}" "${args[@]}" "$@"
