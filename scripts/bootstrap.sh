#!/usr/bin/env bash
# Creates .venv (Python >= 3.11) and installs CODA with the extras given as arguments.
# Used by scripts/up.sh and scripts/test.sh; safe to run again (it only installs what changed).
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-master,dev}"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for cand in python3.11 python3.12 python3.13 python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      PY="$cand"; break
    fi
  done
fi
[ -n "$PY" ] || { echo "CODA needs Python >= 3.11 (apt-get install -y python3.11 python3.11-venv)" >&2; exit 1; }
if [ ! -x .venv/bin/python ]; then
  if ! "$PY" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing python3-venv (Debian/Ubuntu) ..." >&2
      apt-get update -qq && apt-get install -y -qq python3-venv "$(basename "$PY")-venv" >/dev/null 2>&1 || apt-get install -y -qq python3-venv >/dev/null
      "$PY" -m venv .venv
    else
      echo "cannot create a virtualenv: run 'sudo apt-get install -y python3-venv' first" >&2; exit 1
    fi
  fi
fi
stamp=".venv/.coda-installed-$(echo "$extras" | tr ',' '-')"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "installing CODA [$extras] into .venv (first run takes a few minutes) ..." >&2
  .venv/bin/python -m pip install -q --upgrade pip >&2
  case ",$extras," in
    # torch first and pinned, so nothing later pulls a newer (multi-GB CUDA) build
    *,models,*) .venv/bin/python -m pip install -q "torch==2.13.0" >&2 ;;
  esac
  .venv/bin/python -m pip install -q -e ".[$extras]" >&2
  touch "$stamp"
fi
