#!/usr/bin/env bash
# Serve the CODA executor (cerebellum, frozen UI-TARS-1.5-7B) with vLLM's OpenAI-compatible
# server. The executor service pre-fills "Thought: ...\nAction: " and asks vLLM to continue it
# (continue_final_message), and sends at most history_n = 5 screenshots per request.
#
# Settings: CODA_VLLM_EXECUTOR_* (see common.sh); extra arguments go to `vllm serve` unchanged.
# The paper served ByteDance-Seed/UI-TARS-1.5-7B with vLLM 0.8.5.post1, tensor parallel 2.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# image limit 5 = history_n of UI-TARS-1.5 (CODA_EXECUTOR_HISTORY_N)
coda_vllm_serve EXECUTOR ByteDance-Seed/UI-TARS-1.5-7B 2 '{"image":5}' 32768 -- "$@"
