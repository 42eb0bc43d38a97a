#!/usr/bin/env bash
# Base images built from Debian's own packages, for machines that cannot pull from an image
# registry (CI here). Every Dockerfile of deploy/docker takes its base as `--build-arg
# BASE_IMAGE=...` whose default is the usual public image; scripts/docker-build.sh passes these.
#
#   bash scripts/docker-base.sh            # builds what is missing, prints nothing on stdout
#   CODA_DOCKER_REBUILD=1 bash ...         # rebuild even if present
#
#   coda-base/debian:bookworm   mmdebstrap --variant=minbase bookworm | docker import (~15 s)
#   coda-base/python:3.11       Debian's python3 (3.11) in a venv at /opt/venv on PATH: what
#                               python:3.11-slim offers the Dockerfiles (python, pip)
#
# Needs the engine (scripts/docker-engine.sh start) and mmdebstrap; the mirror is Debian's
# (CODA_DEBIAN_MIRROR to change it).
set -euo pipefail
cd "$(dirname "$0")/.."
DEBIAN_IMAGE="${CODA_DEBIAN_IMAGE:-coda-base/debian:bookworm}"
PYTHON_IMAGE="${CODA_PYTHON_IMAGE:-coda-base/python:3.11}"
MIRROR="${CODA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

have() { [ -z "${CODA_DOCKER_REBUILD:-}" ] && docker image inspect "$1" >/dev/null 2>&1; }

if ! have "$DEBIAN_IMAGE"; then
  echo "docker-base: building $DEBIAN_IMAGE from Debian's packages (mmdebstrap) ..." >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  mmdebstrap --quiet --variant=minbase --include=ca-certificates \
    bookworm "$tmp/rootfs.tar" "deb $MIRROR bookworm main" "deb $MIRROR bookworm-updates main" >&2
  docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' \
    "$tmp/rootfs.tar" "$DEBIAN_IMAGE" >/dev/null
fi

if ! have "$PYTHON_IMAGE"; then
  echo "docker-base: building $PYTHON_IMAGE ..." >&2
  docker build -q --network host --build-arg "BASE_IMAGE=$DEBIAN_IMAGE" \
    -t "$PYTHON_IMAGE" -f deploy/docker/Dockerfile.python-base deploy/docker >/dev/null
fi
