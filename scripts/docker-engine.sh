#!/usr/bin/env bash
# The Docker engine the container tests and `docker compose` need, on a Debian/Ubuntu machine.
#
#   bash scripts/docker-engine.sh start   # install what is missing, start dockerd if none answers
#   bash scripts/docker-engine.sh stop    # stop dockerd, only if `start` started it
#   bash scripts/docker-engine.sh status  # exit 0 when an engine answers
#   bash scripts/docker-engine.sh users   # print the lock file the engine's users hold
#   bash scripts/docker-engine.sh stop-unused  # `stop`, unless another user holds the lock
#
# `start` installs Debian's docker.io, docker-compose (1.29) and mmdebstrap (for base images
# built without a registry, scripts/docker-base.sh) when they are missing, as root or with
# passwordless sudo. An engine that already answers is reused and never stopped by `stop`; one
# this script starts is recorded in $state/dockerd.pid and `stop` ends it (and only it).
# `start` prints one word on stdout, `started` or `reused`: a caller that stops the engine
# afterwards does so only after `started` (scripts/test.sh), so a second caller that reused an
# engine another `start` started does not stop it under the first. A caller that outlives its
# `start` (scripts/test.sh) holds a shared flock on the `users` file while it uses the engine,
# and stops it with `stop-unused`: the engine stays up while another caller (another
# checkout's test run reusing it) still holds one.
set -euo pipefail

state="${CODA_DOCKER_STATE:-${CODA_EMBEDDED_ROOT:-/var/lib/coda}/docker}"
pidfile="$state/dockerd.pid"

# SUDO: how to run a command as root ("env": we are root); ROOT=no: we cannot
if [ "$(id -u)" = 0 ]; then
  SUDO=(env); ROOT=yes
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n); ROOT=yes
else
  SUDO=(env); ROOT=no
fi

answers() { docker info >/dev/null 2>&1 || { [ "$ROOT" = yes ] && "${SUDO[@]}" docker info >/dev/null 2>&1; }; }

install_missing() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v docker-compose >/dev/null 2>&1 || docker compose version >/dev/null 2>&1 \
    || missing+=(docker-compose)
  command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$ROOT" = no ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "docker-engine: need ${missing[*]}: install them as root (Debian: apt-get install -y ${missing[*]})" >&2
    return 1
  fi
  echo "docker-engine: installing ${missing[*]} ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq >&2
  "${SUDO[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
}

start() {
  install_missing
  if answers; then
    echo "docker-engine: reusing the running engine" >&2
    echo reused
    return 0
  fi
  if [ "$ROOT" = no ]; then
    echo "docker-engine: no engine answers and starting dockerd needs root" >&2
    return 1
  fi
  "${SUDO[@]}" mkdir -p "$state"
  echo "docker-engine: starting dockerd (log: $state/dockerd.log) ..." >&2
  # setsid: the daemon outlives this shell; its pid is recorded for `stop`
  "${SUDO[@]}" setsid dockerd --pidfile "$state/dockerd.run.pid" >"$state/dockerd.log" 2>&1 \
    </dev/null &
  echo $! | "${SUDO[@]}" tee "$pidfile" >/dev/null
  for _ in $(seq 120); do
    answers && { echo "docker-engine: engine ready" >&2; echo started; return 0; }
    kill -0 "$(cat "$pidfile")" 2>/dev/null || break
    sleep 0.5
  done
  echo "docker-engine: dockerd did not come up; last lines of $state/dockerd.log:" >&2
  tail -20 "$state/dockerd.log" >&2 || true
  return 1
}

stop() {
  [ -f "$pidfile" ] || return 0
  local pid
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    echo "docker-engine: stopping the dockerd this script started (pid $pid)" >&2
    "${SUDO[@]}" kill -TERM "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  "${SUDO[@]}" rm -f "$pidfile"
}

users="$state/users.lock"

stop_unused() {
  [ -f "$pidfile" ] || return 0
  if [ -e "$users" ] && ! flock -n -x "$users" true 2>/dev/null; then
    echo "docker-engine: leaving the engine running: another run still uses it ($users)" >&2
    return 0
  fi
  stop
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  stop-unused) stop_unused ;;
  users) echo "$users" ;;
  status) answers ;;
  *) echo "usage: $0 start|stop|stop-unused|status|users" >&2; exit 2 ;;
esac
