#!/usr/bin/env bash
# Builds the project's images: `deploy/docker/Dockerfile.NAME` -> `coda-NAME:$CODA_IMAGE_TAG`
# (`latest` by default).
#
#   bash scripts/docker-build.sh master models worker postgres redis desktop ...
#   CODA_IMAGE_TAG=mine bash scripts/docker-build.sh desktop  # coda-desktop:mine: two checkouts
#                                   # on one engine keep their own images (the tests, the docker
#                                   # provider's default image and `coda vcsim` read the same
#                                   # variable)
#   CODA_DOCKER_PUBLIC=1 bash scripts/docker-build.sh master   # the Dockerfiles' own defaults
#   CODA_DOCKER_CELESTIA=0 bash scripts/docker-build.sh desktop  # without Celestia (below)
#
# By default nothing is pulled from an image registry or fetched from a package index inside a
# build: the base images come from Debian's packages (scripts/docker-base.sh), Python packages
# from a wheelhouse this host fetches (scripts/docker-wheels.sh) and serves on its loopback for
# the build (`--network host`, `pip install --no-index --find-links http://127.0.0.1:PORT/`).
# With CODA_DOCKER_PUBLIC=1 the Dockerfiles use their defaults (python:3.11-slim, PyPI), as on
# a machine that reaches them. An image already present is rebuilt: the engine's layer cache
# makes an unchanged one take seconds, because the wheelhouse is served on the same port at
# every build of this checkout (the port is part of a build argument, and a build argument that
# changes reruns every step after it: a random port reinstalled every Python package, 126 s).
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${CODA_IMAGE_TAG:-latest}"
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || { echo "docker-build: CODA_IMAGE_TAG=$tag is not a Docker tag" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: $0 IMAGE... (Dockerfiles: $(ls deploy/docker | sed -n 's/^Dockerfile\.//p' | tr '\n' ' '))" >&2; exit 2; }

extras_of() {
  case "$1" in
    master) echo master ;;
    worker) echo worker ;;
    models) echo models,trainer ;;
    desktop) echo guest ;;
    *) echo "" ;;
  esac
}

# the base of each image: Debian's (postgres, redis: Debian's packages) or Python's (the rest)
base_of() {
  case "$1" in
    postgres|redis) echo "${CODA_DEBIAN_IMAGE:-coda-base/debian:bookworm}" ;;
    *) echo "${CODA_PYTHON_IMAGE:-coda-base/python:3.11}" ;;
  esac
}

args=()
local_bases=
if [ -z "${CODA_DOCKER_PUBLIC:-}" ]; then
  local_bases=1
  bash scripts/docker-base.sh
  args+=(--build-arg "DEBIAN_IMAGE=${CODA_DEBIAN_IMAGE:-coda-base/debian:bookworm}")
  need=()
  for img in "$@"; do e="$(extras_of "$img")"; [ -n "$e" ] && need+=("$e"); done
  if [ ${#need[@]} -gt 0 ]; then
    all="$(IFS=,; echo "${need[*]}" | tr ',' '\n' | sort -u | paste -sd,)"
    stamp=".docker-wheels/.stamp-$(cat pyproject.toml <(echo "$all") | sha256sum | cut -c1-12)"
    if [ ! -f "$stamp" ]; then
      bash scripts/docker-wheels.sh "$all"
      touch "$stamp"
    fi
    # the same port at every build of this checkout (from its path), the next free one when
    # another process holds it: a rebuild finds its layers in the cache
    port="$(python3 - "$PWD" <<'PY'
import socket, sys, zlib
first = 20000 + zlib.crc32(sys.argv[1].encode()) % 20000
for port in [*range(first, first + 20), 0]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server: the last build's
    try:                                                   # connections linger in TIME_WAIT
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    print(s.getsockname()[1])
    break
PY
)"
    python3 -m http.server --bind 127.0.0.1 --directory .docker-wheels "$port" >/dev/null 2>&1 &
    server=$!
    trap 'kill $server 2>/dev/null || true' EXIT
    for _ in $(seq 50); do
      python3 -c "import urllib.request as r; r.urlopen('http://127.0.0.1:$port/', timeout=1)" 2>/dev/null && break
      sleep 0.1
    done
    args+=(--build-arg "PIP_INSTALL_FLAGS=--no-index --find-links http://127.0.0.1:$port/")
  fi
fi

# Celestia for the desktop image, never compiled inside a build: scripts/celestia.sh builds it
# on this host once per machine (cached; about 11 minutes cold), and its installed prefix (with
# Celestia's data) becomes the image coda-celestia:<key> (`docker import`, once per key), which
# Dockerfile.desktop copies to the same path (the binary has its prefix compiled in). Without a
# build here (no sources, offline) the image holds none and the Celestia container tests skip;
# under CI=true that is an error. CODA_DOCKER_CELESTIA=0: an image without Celestia (no build).
celestia_args() {
  local prefix="" key=none
  if [ "${CODA_DOCKER_CELESTIA:-1}" = 0 ]; then
    echo "docker-build: CODA_DOCKER_CELESTIA=0: coda-desktop without Celestia" >&2
  elif prefix="$(bash scripts/celestia.sh)" && [ -n "$prefix" ] && [ -f "$prefix/.built" ]; then
    key="$(basename "$prefix")"
  elif [ "${CI:-}" = true ]; then
    echo "docker-build: Celestia could not be built (CI=true: the desktop image must hold it)" >&2
    exit 1
  else
    echo "docker-build: no Celestia build on this host: coda-desktop holds none" >&2
  fi
  [ "$key" != none ] || prefix=""
  local image=scratch  # none: Dockerfile.desktop's default, nothing copied
  if [ -n "$prefix" ]; then
    image="coda-celestia:$key"
    if ! docker image inspect "$image" >/dev/null 2>&1; then
      echo "docker-build: $image from $prefix ..." >&2
      tar -C / -c "${prefix#/}" | docker import - "$image" >/dev/null
    fi
  fi
  # one word a line: the build's arguments
  printf -- '--build-arg\n%s\n' "CELESTIA_IMAGE=$image" "CELESTIA_KEY=$key" \
    "CELESTIA_DIR=$(dirname "${prefix:-/opt/coda/celestia/none}")"
}

for img in "$@"; do
  file="deploy/docker/Dockerfile.$img"
  [ -f "$file" ] || { echo "docker-build: no $file" >&2; exit 2; }
  echo "docker-build: coda-$img:$tag ..." >&2
  start=$(date +%s)
  base=()
  [ -n "$local_bases" ] && base=(--build-arg "BASE_IMAGE=$(base_of "$img")")
  if [ "$img" = desktop ]; then
    more="$(celestia_args)"
    mapfile -t more_args <<<"$more"
    base+=("${more_args[@]}")
  fi
  docker build -q --network host ${args[@]+"${args[@]}"} "${base[@]}" -f "$file" -t "coda-$img:$tag" . \
    >/dev/null
  echo "docker-build: coda-$img:$tag built in $(( $(date +%s) - start )) s" >&2
done
