#!/bin/sh
# coda-redis: `redis-server [options]` without a config file runs with protected mode off
# (as the official image does), so other containers of the compose network can connect.
set -eu
if [ "${1:-}" = redis-server ]; then
  case "${2:-}" in
    *.conf) ;;
    *) set -- "$@" --protected-mode no ;;
  esac
fi
exec "$@"
