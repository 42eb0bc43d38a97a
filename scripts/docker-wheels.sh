#!/usr/bin/env bash
# A wheelhouse for image builds that cannot reach a package index from inside the build (no
# registry, a TLS proxy whose CA only the host trusts): this host's pip (its own indexes and
# find-links) fetches the project's dependencies for the given extras into .docker-wheels/,
# and scripts/docker-build.sh has the Dockerfiles install from there with `--no-index`.
#
#   bash scripts/docker-wheels.sh master,worker,guest,models,trainer
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:?usage: docker-wheels.sh EXTRA[,EXTRA...]}"
out=".docker-wheels"
mkdir -p "$out"
py="${PYTHON:-python3}"
[ -x .venv/bin/python ] && py=.venv/bin/python
echo "docker-wheels: fetching wheels for .[$extras] into $out/ ..." >&2
# build requirements too: the image builds the project itself without an index; and what the
# images' Python needs beyond this host's: Debian bookworm's python3 is 3.11.2, below the
# `python_full_version < "3.11.3"` marker of redis's async-timeout dependency
"$py" -m pip download -q --dest "$out" "setuptools>=77" wheel "async-timeout>=4.0.3" >&2
"$py" -m pip wheel -q --wheel-dir "$out" ".[$extras]" >&2
# the project's own wheel is rebuilt in the image from its sources
rm -f "$out"/coda-*.whl
