#!/usr/bin/env bash
# Quick start, tests: installs every extra (torch pinned to 2.13.0) and runs the whole suite
# against real Postgres/Redis (DATABASE_URL / REDIS_URL when set, embedded servers otherwise),
# real tiny transformers models, vLLM's own server (tests/vllm), real HTTP, a real Docker
# engine (tests marked `docker`: the compose stack, desktop containers) and VMware's vSphere
# simulator vcsim (scripts/vcsim.sh builds it once per machine; the vSphere tests start their
# own instances, whose VMs run the desktop image on that engine). The engine is started
# here when none answers (installed when missing) and stopped afterwards if this script started
# it; images are built by the tests that need them (scripts/docker-build.sh, no registry).
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh master,worker,models,dev,trainer,tensorboard
bash scripts/desktop-deps.sh  # Xvfb, window manager, TeXstudio, KAlgebra, GRASS GIS (root/sudo)
bash scripts/vllm-install.sh >/dev/null  # vLLM's CPU build in its own venv, for tests/vllm
# Celestia (ScienceBoard's fork) from source, once per machine (about 11 minutes on 2 cores;
# the sources: $CODA_CELESTIA_SOURCES, else GitHub at the pinned commits), for its tasks' tests
if ! bash scripts/celestia.sh >/dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "test.sh: Celestia could not be built (CI=true: the Celestia tests must run)" >&2
    exit 1
  fi
  echo "test.sh: no Celestia build: the Celestia tests skip" >&2
fi
if ! bash scripts/vcsim.sh >/dev/null; then  # vcsim from Debian's govmomi, for the vSphere tests
  if [ "${CI:-}" = true ]; then
    echo "test.sh: vcsim could not be built (CI=true: the vSphere tests must run)" >&2
    exit 1
  fi
  echo "test.sh: no vcsim: the vSphere tests skip" >&2
fi
if engine="$(bash scripts/docker-engine.sh start)"; then
  # stops only a dockerd this call started (an engine that was running stays, whoever started it)
  if [ "$engine" = started ]; then trap 'bash scripts/docker-engine.sh stop' EXIT; fi
  bash scripts/docker-base.sh  # Debian / Python base images from Debian's packages
elif [ "${CI:-}" = true ]; then
  echo "test.sh: no Docker engine (CI=true: the docker tests must run)" >&2
  exit 1
else
  echo "test.sh: no Docker engine: the docker tests skip" >&2
fi
rc=0
.venv/bin/python -m pytest -q "$@" || rc=$?
exit "$rc"
