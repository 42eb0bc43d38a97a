# Shared by planner.sh, executor.sh and judge.sh: build and exec the `vllm serve` command line.
# Usage (after `source`): coda_vllm_serve ROLE MODEL TP LIMIT_MM MAX_MODEL_LEN [role flags...] -- "$@"
# Every default can be overridden by CODA_VLLM_<ROLE>_{MODEL,SERVED_NAME,HOST,PORT,TP,LIMIT_MM,
# MAX_MODEL_LEN,GPU_MEMORY,DTYPE}; CODA_VLLM_API_KEY and CODA_VLLM_BIN apply to all roles.
# vLLM < 0.9 wants the multimodal limit as `image=N` instead of JSON.

coda_vllm_serve() {
  local role="$1" model="$2" tp="$3" limit_mm="$4" max_len="$5"
  shift 5
  local extra=()
  while [[ $# -gt 0 && "$1" != "--" ]]; do extra+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift  # the "--"
  local p="CODA_VLLM_${role}"
  local v_model="${p}_MODEL" v_name="${p}_SERVED_NAME" v_host="${p}_HOST" v_port="${p}_PORT"
  local v_tp="${p}_TP" v_mm="${p}_LIMIT_MM" v_len="${p}_MAX_MODEL_LEN"
  local v_gpu="${p}_GPU_MEMORY" v_dtype="${p}_DTYPE"
  model="${!v_model:-${model}}"
  local args=(
    serve "${model}"
    --served-model-name "${!v_name:-${model}}"
    --host "${!v_host:-0.0.0.0}" --port "${!v_port:-8000}"
    --tensor-parallel-size "${!v_tp:-${tp}}"
    --dtype "${!v_dtype:-bfloat16}"
    --max-model-len "${!v_len:-${max_len}}"
    --gpu-memory-utilization "${!v_gpu:-0.90}"
    --limit-mm-per-prompt "${!v_mm:-${limit_mm}}"
    "${extra[@]}"
  )
  if [[ -n "${CODA_VLLM_API_KEY:-}" ]]; then
    args+=(--api-key "${CODA_VLLM_API_KEY}")
  fi
  echo "vllm ${args[*]} $*" >&2
  exec "${CODA_VLLM_BIN:-vllm}" "${args[@]}" "$@"
}
