#!/usr/bin/env bash
# Celestia for ScienceBoard's astronomy tasks: builds ScienceBoard's fork of Celestia (its Qt 6
# front end answers a state dump over HTTP) from source with Debian's packages, once per
# machine, installs Celestia's data beside it, and prints the install prefix on stdout (nothing
# else; progress and timing go to stderr). Quick when it is built already.
#
#   bash scripts/celestia.sh           # -> /var/lib/coda/celestia/<key> (as root)
#                                      #    bin/celestia-qt6, share/celestia/celestia.cfg
#
# Sources: $CODA_CELESTIA_SOURCES names a folder holding the two pinned archives below (checked
# against their sha256); where it is unset or lacks them and the machine is online, the same
# pinned commits are taken from GitHub (git checks them by their commit hash). The content's
# stars.dat then is upstream's, not the older one of the archives (see docs/coverage.md).
# The fork, patched by deploy/celestia/patches/*.patch (applied in order):
#   01 the dump server listens on 127.0.0.1 only (reached through the guest agent) and reads
#      the state on the GUI thread; 02 it reads whole requests, answers dumps over 8 KiB and
#      waits for requests without spinning;
#   03 celestia.cfg names the content's star catalogues and cross indexes (else a star query
#      aborts it); 04 an idle frame cap (CODA_CELESTIA_IDLE_FPS, default 2; 0: off).
#
# Where: $CODA_CELESTIA_DIR if set; else /var/lib/coda/celestia as root (following
# CODA_EMBEDDED_ROOT); else ~/.cache/coda/celestia. <key> hashes the archives' checksums, the
# patches and this script, so a change of any of them builds anew. A lock serialises runs.
# The build takes about 11 minutes on 2 cores (CODA_CELESTIA_JOBS, default: the core count).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
patches="$here/deploy/celestia/patches"

FORK_REPO=https://github.com/ShiinaHiiragi/Celestia.git
FORK_COMMIT=d9114bb58ecc7ad594eac81fbfc5834a15244334
FORK_ARCHIVE=celestia-scienceboard-d9114bb5-src.tar.xz
FORK_SHA256=ab1578efc8f15bb24a1121ef83745b5d89a8f0ae5eff02ad11589f1b426ebebb
CONTENT_REPO=https://github.com/CelestiaProject/CelestiaContent.git
CONTENT_COMMIT=d156a8b5ed3f03add56c706880cc879b99ba26f9
CONTENT_ARCHIVE=celestia-content-d156a8b5.tar.xz
CONTENT_SHA256=9c840f55fd222636070ec6340211f10dc7b61b023f18eddf01631b3359481948
DEBS=(cmake g++ make patch xz-utils qt6-base-dev libqt6opengl6-dev libeigen3-dev libfmt-dev
  libepoxy-dev libluajit-5.1-dev libjpeg-dev libpng-dev libfreetype-dev libboost-dev gperf
  gettext)

say() { echo "celestia: $*" >&2; }

if [ -n "${CODA_CELESTIA_DIR:-}" ]; then
  root="$CODA_CELESTIA_DIR"
elif [ "$(id -u)" = 0 ]; then
  root="${CODA_EMBEDDED_ROOT:-/var/lib/coda}/celestia"
else
  root="${XDG_CACHE_HOME:-$HOME/.cache}/coda/celestia"
fi
key="$( { echo "$FORK_SHA256 $CONTENT_SHA256"; cat "$patches"/*.patch "$0"; } | sha256sum | cut -c1-12)"
prefix="$root/$key"
done_mark() { [ -f "$prefix/.built" ] && [ -x "$prefix/bin/celestia-qt6" ]; }
if done_mark; then echo "$prefix"; exit 0; fi

mkdir -p "$root"
exec 9>"$root/.build.lock"
flock 9
if done_mark; then echo "$prefix"; exit 0; fi
started=$SECONDS

missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
  else
    say "needs Debian's ${missing[*]}: run 'sudo bash scripts/celestia.sh'"
    exit 1
  fi
  say "installing ${missing[*]} (Debian) ..."
  export DEBIAN_FRONTEND=noninteractive
  "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    "${SUDO[@]}" apt-get update -qq >&2
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  }
fi

work="$root/$key.build"  # kept when a build fails, so that a rerun resumes it
mkdir -p "$work"
# fetch <archive> <sha256> <repo> <commit> <dest>: the archive's tree (top folder stripped) in dest
fetch() {
  local archive="$1" sha="$2" repo="$3" commit="$4" dest="$5" src="${CODA_CELESTIA_SOURCES:-}"
  if [ -n "$src" ] && [ -f "$src/$archive" ]; then
    say "checking $src/$archive"
    echo "$sha  $src/$archive" | sha256sum -c --quiet - >&2 || { say "$archive: sha256 differs"; exit 1; }
    mkdir -p "$dest"
    tar -xJf "$src/$archive" -C "$dest" --strip-components=1
  elif command -v git >/dev/null 2>&1 && git ls-remote "$repo" >/dev/null 2>&1; then
    say "no $archive${src:+ in $src}: fetching $repo at $commit"
    rm -rf "$dest.git" && git init -q "$dest.git"
    git -C "$dest.git" fetch -q --depth 1 "$repo" "$commit"
    [ "$(git -C "$dest.git" rev-parse FETCH_HEAD)" = "$commit" ] || { say "$repo: not $commit"; exit 1; }
    mkdir -p "$dest"
    git -C "$dest.git" archive FETCH_HEAD | tar -x -C "$dest"
    rm -rf "$dest.git"
  else
    say "no sources: set CODA_CELESTIA_SOURCES to a folder with $archive (sha256 $sha), or go online"
    exit 1
  fi
}
if [ ! -f "$work/src/.patched" ]; then
  rm -rf "$work/src"
  fetch "$FORK_ARCHIVE" "$FORK_SHA256" "$FORK_REPO" "$FORK_COMMIT" "$work/src"
  for p in "$patches"/*.patch; do
    say "patch $(basename "$p")"
    patch -s -p1 -d "$work/src" <"$p" >&2
  done
  touch "$work/src/.patched"
fi

jobs="${CODA_CELESTIA_JOBS:-$(nproc)}"
say "configuring (cmake, Qt 6) in $work/build ..."
mkdir -p "$work/build"
cmake -S "$work/src" -B "$work/build" -DENABLE_QT6=ON -DENABLE_QT5=OFF -DENABLE_WIN=OFF \
  -DENABLE_NLS=OFF -DENABLE_SDL=OFF -DENABLE_GTK=OFF -DENABLE_TOOLS=OFF \
  -DENABLE_TESTS=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  >"$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log" >&2; say "cmake failed (log: $work/cmake.log)"; exit 1; }
say "compiling with $jobs jobs (about 11 minutes on 2 cores; progress every 10 %) ..."
built=$SECONDS
set +e
nice -n 10 cmake --build "$work/build" -j "$jobs" 2>&1 | tee "$work/make.log" | {
  last=-10
  while IFS= read -r line; do
    if [[ "$line" =~ ^\[\ *([0-9]+)%\] ]]; then
      p=${BASH_REMATCH[1]}
      if [ "$p" -ge $((last + 10)) ]; then
        last=$((p - p % 10))
        say "  $p % after $((SECONDS - built)) s"
      fi
    fi
  done
}
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
  grep -E "error|Error" "$work/make.log" | head -20 >&2
  say "build failed (log: $work/make.log; a rerun resumes it)"
  exit 1
fi
say "compiled in $((SECONDS - built)) s; installing into $prefix"
cmake --install "$work/build" >"$work/install.log" 2>&1 || { tail -20 "$work/install.log" >&2; exit 1; }
say "installing the data (CelestiaContent) into $prefix/share/celestia"
cfg="$prefix/share/celestia/celestia.cfg"
cp "$cfg" "$work/celestia.cfg"
fetch "$CONTENT_ARCHIVE" "$CONTENT_SHA256" "$CONTENT_REPO" "$CONTENT_COMMIT" "$prefix/share/celestia"
cp "$work/celestia.cfg" "$cfg"  # the patched configuration, not whatever the content carries
for f in stars-revised.stc starxindex-hd.dat starxindex-sao.dat; do
  grep -q "data/$f" "$cfg" && [ -f "$prefix/share/celestia/data/$f" ] || {
    say "celestia.cfg and the data disagree about $f"
    exit 1
  }
done
touch "$prefix/.built"
rm -rf "$work"
say "built and installed in $((SECONDS - started)) s: $prefix"
echo "$prefix"
