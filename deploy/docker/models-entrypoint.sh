#!/bin/sh
# The models image's entrypoint: with CODA_TINY_MODEL_DIR set, build the tiny random
# Qwen2.5-VL there first if it is not there yet (offline, a few seconds; the CPU stack's trainer
# trains it), then run the command.
set -eu
if [ -n "${CODA_TINY_MODEL_DIR:-}" ] && [ ! -f "$CODA_TINY_MODEL_DIR/config.json" ]; then
  python -c 'import sys
from pathlib import Path
from coda.inference.tiny import build_tiny_qwen25vl
out = Path(sys.argv[1])
tmp = out.with_name(out.name + ".partial")
build_tiny_qwen25vl(tmp)
tmp.rename(out)' "$CODA_TINY_MODEL_DIR"
fi
exec "$@"
