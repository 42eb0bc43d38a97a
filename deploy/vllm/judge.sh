#!/usr/bin/env bash
# Serve the CODA judge model (Qwen2.5-VL-72B-Instruct) with vLLM's OpenAI-compatible server.
# The judge service sends a whole trajectory (up to JudgePolicy.max_frames screenshots, 16 by
# default) and asks for k votes in one request (n=k), so the image limit and the context are
# larger than the planner's. A second judge of the ensemble (e.g. a fine-tuned 72B) is another
# instance of this script with its own CODA_VLLM_JUDGE_MODEL / PORT / GPUs.
#
# Settings: CODA_VLLM_JUDGE_* (see common.sh); extra arguments go to `vllm serve` unchanged.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# image limit 16 = JudgePolicy.max_frames default
coda_vllm_serve JUDGE Qwen/Qwen2.5-VL-72B-Instruct 4 '{"image":16}' 65536 -- "$@"
