#!/usr/bin/env bash
# Debian packages of the local desktop provider's slot image (worker/providers/image/packages.txt):
# Xvfb, a window manager, xterm, X tools, three of ScienceBoard's applications (TeXstudio,
# KAlgebra, GRASS GIS) and LaTeX for TeXstudio's compile checker. Installs what is missing when
# running as root or with passwordless sudo; otherwise prints one line and changes nothing (the
# desktop tests then skip locally, and fail under CI=true). Quick when nothing is missing.
# Then GRASS GIS's stand-in data sets (worker/providers/image/grassdata.py, built from GRASS's
# own packaged data into ~/.cache/coda/grassdata, or $CODA_GRASSDATA; about a minute, once).
set -euo pipefail
cd "$(dirname "$0")/.."

grass_data() {
  if command -v grass >/dev/null 2>&1 && [ -x /usr/bin/python3 ]; then
    /usr/bin/python3 worker/providers/image/grassdata.py
  fi
}
trap grass_data EXIT

missing=()
while read -r line; do
  read -r pkg cmd _ <<< "${line%%#*}"
  [ -n "${pkg:-}" ] || continue
  if [ "$cmd" != "-" ]; then
    command -v "$cmd" >/dev/null 2>&1 && continue
  elif dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
    continue
  fi
  missing+=("$pkg")
done < worker/providers/image/packages.txt
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ]; then
  SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO=(sudo -n)
else
  echo "desktop tests need Debian packages (${missing[*]}): run 'sudo bash scripts/desktop-deps.sh'" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "desktop tests need ${missing[*]} and this is not a Debian/Ubuntu system: install them by hand" >&2
  exit 0
fi
echo "installing desktop packages: ${missing[*]} (first run takes a few minutes) ..." >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >&2
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
