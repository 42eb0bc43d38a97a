#!/usr/bin/env bash
# Quick start, tests: installs every extra (torch pinned to 2.13.0) and runs the whole suite
# against real Postgres/Redis (DATABASE_URL / REDIS_URL when set, embedded servers otherwise),
# real tiny transformers models and real HTTP. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh master,worker,models,dev
bash scripts/desktop-deps.sh  # Xvfb, window manager, TeXstudio, KAlgebra, GRASS GIS (root/sudo)
exec .venv/bin/python -m pytest -q "$@"
