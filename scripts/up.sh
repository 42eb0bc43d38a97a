#!/usr/bin/env bash
# Quick start, main job: the whole loop on this machine. Embedded Postgres + Redis, the master
# with its dashboard (http://127.0.0.1:8000/), the planner / executor / judge services, a local
# worker with Xvfb desktops running the real TeXstudio, and the trainer on the tiny Qwen2.5-VL.
# The models answer from recorded outputs (--models replay) so episodes succeed, get judged,
# become GRPO groups and the trainer publishes new planner versions; `coda up --models tiny`
# serves the tiny random model instead. Ctrl-C stops everything; the next start keeps the data.
# Arguments go to `coda up` (e.g. --port 8080 --slots 4 --home /srv/coda).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh master,worker,models,trainer
bash scripts/desktop-deps.sh  # Xvfb, window manager, TeXstudio, ... (root or passwordless sudo)
exec .venv/bin/coda up --models replay --train "$@"
