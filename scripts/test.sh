#!/usr/bin/env bash
# Quick start, tests: installs every extra (torch pinned to 2.13.0) and runs the whole suite
# against real Postgres/Redis (DATABASE_URL / REDIS_URL when set, embedded servers otherwise),
# real tiny transformers models, vLLM's own server (tests/vllm) and real HTTP.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh master,worker,models,dev,trainer,tensorboard
bash scripts/desktop-deps.sh  # Xvfb, window manager, TeXstudio, KAlgebra, GRASS GIS (root/sudo)
bash scripts/vllm-install.sh >/dev/null  # vLLM's CPU build in its own venv, for tests/vllm
exec .venv/bin/python -m pytest -q "$@"
