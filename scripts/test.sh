#!/usr/bin/env bash
# Quick start, tests: installs every extra (torch pinned to 2.13.0) and runs the whole suite
# against real Postgres/Redis (DATABASE_URL / REDIS_URL when set, embedded servers otherwise),
# real tiny transformers models, vLLM's own server (tests/vllm), real HTTP, a real Docker
# engine (tests marked `docker`: the compose stack, desktop containers) and VMware's vSphere
# simulator vcsim (scripts/vcsim.sh builds it once per machine; the vSphere tests start their
# own instances, whose VMs run the desktop image on that engine). The engine is started
# here when none answers (installed when missing) and stopped afterwards if this script started
# it; images are built by the tests that need them (scripts/docker-build.sh, no registry).
#
#   bash scripts/test.sh [--busy N] [--repeat K] [PYTEST ARGS...]
#
# PYTEST ARGS select what runs (paths, -k, -m; default: everything). --busy N runs N busy loops
# (one core each) beside pytest, as a loaded CI machine would; --repeat K runs the selection K
# times (each run's outcome is printed; the exit code is the first failing run's). Each set-up
# phase prints its time, the run the 25 slowest tests (docs/testing.md, "Time").
set -euo pipefail
cd "$(dirname "$0")/.."
busy=0
repeat=1
while [ $# -gt 0 ]; do
  case "$1" in
    --busy) busy="${2:?--busy needs a number of loops}"; shift 2 ;;
    --busy=*) busy="${1#--busy=}"; shift ;;
    --repeat) repeat="${2:?--repeat needs a number of runs}"; shift 2 ;;
    --repeat=*) repeat="${1#--repeat=}"; shift ;;
    *) break ;;
  esac
done
case "$busy$repeat" in *[!0-9]*) echo "test.sh: --busy and --repeat take whole numbers" >&2; exit 2 ;; esac
[ "$repeat" -ge 1 ] || { echo "test.sh: --repeat must be at least 1" >&2; exit 2; }

logs="$(mktemp -d "${TMPDIR:-/tmp}/coda-test-setup.XXXXXX")"
cleanup=()
on_exit() { local c; for c in "${cleanup[@]}"; do eval "$c" || true; done; rm -rf "$logs"; }
trap on_exit EXIT
started=$SECONDS
timings=()
# phase NAME CMD...: runs CMD, records how long it took; its status is returned
phase() {
  local name="$1" t0=$SECONDS rc=0 note=""
  shift
  "$@" || rc=$?
  [ "$rc" = 0 ] || note=" (exit $rc)"
  timings+=("$name $((SECONDS - t0)) s")
  echo "test.sh: [set-up] $name: $((SECONDS - t0)) s$note" >&2
  return "$rc"
}
# in_background NAME CMD...: CMD in a process group of its own in the background (stopped with
# everything it started if this script ends first), its output in a log; finish NAME waits
declare -A bg_pid bg_t0
in_background() {
  local name="$1"
  shift
  bg_t0[$name]=$SECONDS
  setsid "$@" >"$logs/$name.out" 2>"$logs/$name.err" &
  bg_pid[$name]=$!
  cleanup+=("kill -TERM -- -${bg_pid[$name]} 2>/dev/null")
}
finish() {
  local name="$1" rc=0 note=""
  wait "${bg_pid[$name]}" || rc=$?
  [ "$rc" = 0 ] || note=" (exit $rc)"
  timings+=("$name $((SECONDS - bg_t0[$name])) s")
  echo "test.sh: [set-up] $name (in the background): $((SECONDS - bg_t0[$name])) s$note" >&2
  if [ "$rc" != 0 ]; then tail -n 30 "$logs/$name.err" >&2; fi
  return "$rc"
}

phase "python env (.venv)" bash scripts/bootstrap.sh master,worker,models,dev,trainer,tensorboard
# Xvfb, window manager, TeXstudio, KAlgebra, GRASS GIS (root/sudo)
phase "desktop packages" bash scripts/desktop-deps.sh
# vcsim from Debian's govmomi, for the vSphere tests (Debian packages first: apt runs one at a time)
vcsim_ok=1
phase "vcsim" bash scripts/vcsim.sh >/dev/null || vcsim_ok=0
engine=none
if phase "docker engine" bash scripts/docker-engine.sh start >"$logs/engine"; then
  engine="$(cat "$logs/engine")"  # started or reused
  # this run uses the engine: a shared lock, held until it ends by a process of its own (not
  # by this shell, whose children would inherit it), so a run of another checkout that
  # started the engine leaves it up meanwhile
  users="$(bash scripts/docker-engine.sh users)"
  if [ -d "$(dirname "$users")" ]; then
    setsid flock -s "$users" sleep infinity </dev/null >/dev/null 2>&1 &
    cleanup+=("kill -TERM -- -$! 2>/dev/null; wait $! 2>/dev/null")
  fi
  # stops only a dockerd this call started (an engine that was running stays, whoever started
  # it), and only when no other run uses it any more
  if [ "$engine" = started ]; then cleanup+=("bash scripts/docker-engine.sh stop-unused"); fi
fi
# The long builds after every apt install above, side by side: Celestia (ScienceBoard's fork)
# from source once per machine (about 4-11 minutes on 2 cores; the sources: $CODA_CELESTIA_SOURCES,
# else GitHub at the pinned commits), vLLM's CPU build in its own venv (tests/vllm) and the
# Docker base images from Debian's packages
in_background celestia bash scripts/celestia.sh
# ChimeraX from RBVI's pinned sources ($CODA_CHIMERAX_SOURCES, else GitHub; 14-22 minutes on
# 2 cores cold, instant when built): at the lowest CPU priority, and not waited for before the
# tests: it builds on while they run (the ChimeraX tests, near the end, wait for its lock:
# tests/worker/chimerax_helpers.py) and is waited for after them; the tests that run it skip
# without it, except under CI=true
in_background chimerax nice -n 19 bash scripts/chimerax.sh
in_background vllm bash scripts/vllm-install.sh
if [ "$engine" != none ]; then
  phase "docker base images" bash scripts/docker-base.sh
elif [ "${CI:-}" = true ]; then
  echo "test.sh: no Docker engine (CI=true: the docker tests must run)" >&2
  exit 1
else
  echo "test.sh: no Docker engine: the docker tests skip" >&2
fi
finish vllm
if ! finish celestia; then
  if [ "${CI:-}" = true ]; then
    echo "test.sh: Celestia could not be built (CI=true: the Celestia tests must run)" >&2
    exit 1
  fi
  echo "test.sh: no Celestia build: the Celestia tests skip" >&2
fi
if [ "$vcsim_ok" = 0 ]; then
  if [ "${CI:-}" = true ]; then
    echo "test.sh: vcsim could not be built (CI=true: the vSphere tests must run)" >&2
    exit 1
  fi
  echo "test.sh: no vcsim: the vSphere tests skip" >&2
fi
echo "test.sh: set-up took $((SECONDS - started)) s: $(IFS=';'; echo "${timings[*]}" | sed 's/;/, /g')" >&2

if [ "$busy" -gt 0 ]; then
  for _ in $(seq "$busy"); do
    ( trap 'exit 0' TERM; while :; do :; done ) &
    cleanup+=("kill $! 2>/dev/null")
  done
  echo "test.sh: $busy busy loop(s) beside the tests" >&2
fi
rc=0
for run in $(seq "$repeat"); do
  t0=$SECONDS
  run_rc=0
  .venv/bin/python -m pytest -q --durations=25 "$@" || run_rc=$?
  if [ "$repeat" -gt 1 ]; then
    echo "test.sh: run $run of $repeat: exit $run_rc in $((SECONDS - t0)) s (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  fi
  if [ "$rc" = 0 ]; then rc=$run_rc; fi
done
if ! finish chimerax; then
  if [ "${CI:-}" = true ]; then
    echo "test.sh: ChimeraX could not be built (CI=true: the ChimeraX tests must run)" >&2
    [ "$rc" != 0 ] || rc=1
  else
    echo "test.sh: no ChimeraX build: the ChimeraX tests skipped" >&2
  fi
fi
exit "$rc"
