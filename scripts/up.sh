#!/usr/bin/env bash
# Quick start, main job: the master on embedded Postgres + Redis with the ScienceBoard demo
# batch; open http://127.0.0.1:8000/ for the status page. Ctrl-C stops everything.
# Arguments go to `coda up` (e.g. --port 8080 --home /srv/coda).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh master,dev
exec .venv/bin/coda up "$@"
