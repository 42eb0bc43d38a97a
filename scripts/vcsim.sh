#!/usr/bin/env bash
# VMware's vSphere simulator (vcsim) for the vsphere provider's tests, benchmarks and
# developers: builds the project's own small main (deploy/vcsim/main.go) over Debian's govmomi
# sources, offline, when it is missing, and prints the binary's path on stdout (nothing else;
# progress goes to stderr). Quick when it is built already.
#
#   bash scripts/vcsim.sh              # -> /var/lib/coda/vcsim/<key>/coda-vcsim (as root)
#
# Needs Debian's golang-go and golang-github-vmware-govmomi-dev (govmomi 0.24: the simulator
# library, no vcsim command): installed here when missing and this runs as root or with
# passwordless sudo. Built in GOPATH mode with no module proxy (GO111MODULE=off, GOPROXY=off).
#
# Where: $CODA_VCSIM_DIR if set; else /var/lib/coda/vcsim as root (the project's machine-wide
# folder, like vLLM's: CI machines build it once), following CODA_EMBEDDED_ROOT; else
# ~/.cache/coda/vcsim. <key> names the main's source, Go's version and govmomi's, so a change
# of any of them builds anew. A lock serialises concurrent runs.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
src="$here/deploy/vcsim/main.go"
GOCODE=/usr/share/gocode
GOVMOMI="$GOCODE/src/github.com/vmware/govmomi"

if ! command -v go >/dev/null 2>&1 || [ ! -d "$GOVMOMI/simulator" ]; then
  if [ "$(id -u)" = 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    echo "vcsim: needs golang-go and golang-github-vmware-govmomi-dev: run 'sudo bash scripts/vcsim.sh'" >&2
    exit 1
  fi
  echo "vcsim: installing golang-go golang-github-vmware-govmomi-dev (Debian) ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get update -qq >&2
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends golang-go \
    golang-github-vmware-govmomi-dev >/dev/null
fi

if [ -n "${CODA_VCSIM_DIR:-}" ]; then
  root="$CODA_VCSIM_DIR"
elif [ "$(id -u)" = 0 ]; then
  root="${CODA_EMBEDDED_ROOT:-/var/lib/coda}/vcsim"
else
  root="${XDG_CACHE_HOME:-$HOME/.cache}/coda/vcsim"
fi
govmomi_version="$(dpkg-query -W -f='${Version}' golang-github-vmware-govmomi-dev 2>/dev/null || echo unknown)"
key="$( { cat "$src"; go version; echo "$govmomi_version"; } | sha256sum | cut -c1-12)"
bin="$root/$key/coda-vcsim"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

mkdir -p "$root"
exec 9>"$root/.build.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

echo "vcsim: building $bin from $src over govmomi $govmomi_version (about a minute) ..." >&2
started=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/coda-vcsim" "$root/$key"
cp "$src" "$work/src/coda-vcsim/main.go"
(
  cd "$work/src/coda-vcsim"
  GOPATH="$work:$GOCODE" GO111MODULE=off GOPROXY=off GOFLAGS= GOCACHE="$root/gocache" \
    go build -o "$work/coda-vcsim" . >&2
)
mv "$work/coda-vcsim" "$bin"
echo "vcsim: built in $((SECONDS - started)) s" >&2
echo "$bin"
