#!/usr/bin/env bash
# Serve the CODA judge model (Qwen2.5-VL-72B-Instruct) with vLLM's OpenAI-compatible server.
# The judge service sends a whole trajectory (up to JudgePolicy.max_frames screenshots, 16 by
# default) and asks for k votes in one request (n=k), so the image limit and the context are
# larger than the planner's. A second judge of the ensemble (e.g. a fine-tuned 72B) is another
# instance of this script with its own CODA_VLLM_JUDGE_MODEL / PORT / GPUs.
#
# Every setting comes from the environment; extra arguments go to `vllm serve` unchanged.
# vLLM < 0.9 wants the multimodal limit as `image=16` instead of JSON.
set -euo pipefail

MODEL="${CODA_VLLM_JUDGE_MODEL:-Qwen/Qwen2.5-VL-72B-Instruct}"
SERVED_NAME="${CODA_VLLM_JUDGE_SERVED_NAME:-${MODEL}}"
HOST="${CODA_VLLM_JUDGE_HOST:-0.0.0.0}"
PORT="${CODA_VLLM_JUDGE_PORT:-8000}"
TP="${CODA_VLLM_JUDGE_TP:-4}"
DEFAULT_LIMIT_MM='{"image":16}'  # JudgePolicy.max_frames default
LIMIT_MM="${CODA_VLLM_JUDGE_LIMIT_MM:-${DEFAULT_LIMIT_MM}}"
MAX_MODEL_LEN="${CODA_VLLM_JUDGE_MAX_MODEL_LEN:-65536}"
GPU_MEMORY="${CODA_VLLM_JUDGE_GPU_MEMORY:-0.90}"
DTYPE="${CODA_VLLM_JUDGE_DTYPE:-bfloat16}"

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
