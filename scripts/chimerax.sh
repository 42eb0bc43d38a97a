#!/usr/bin/env bash
# UCSF ChimeraX for ScienceBoard's ChimeraX tasks: builds ChimeraX from source on this machine
# (its Linux installers are not to be redistributed, and ChimeraX is not in Debian), once per
# machine, with ScienceBoard's SessionStates bundle (the `states` command its checkers read)
# installed, and prints the install prefix on stdout (nothing else; progress and per-phase
# timings go to stderr). Quick when it is built already.
#
#   bash scripts/chimerax.sh           # -> /var/lib/coda/chimerax/<key> (as root)
#                                      #    bin/chimerax (the launcher), venv/, share/chimerax-states/
#
# LICENCE: ChimeraX is under the UCSF ChimeraX Non-Commercial Software License Agreement
# (License.md in its tree): academic, non-profit or government-sponsored research only, no
# redistribution. Whoever runs this script builds it from RBVI's upstream sources on their own
# machine and accepts that licence. Nothing of ChimeraX (sources, patched files, wheels, venv)
# belongs in this repository or in a published image; the project carries only this script and
# the `cxservices` stub the script writes.
#
# Sources: $CODA_CHIMERAX_SOURCES names a folder holding the pinned archives below (checked
# against their sha256); where it is unset or lacks them and the machine is online, the same
# pinned commits are taken from GitHub (git checks them by their commit hash). Python packages
# come from PyPI (uv), Debian packages from apt-get (as root, when missing).
#
# The fixes, steps of this script (see also the recipe in docs/desktops.md):
#   - bundle_builder's XML-to-TOML conversion names Linux-only link libraries
#     extension.<name>.linux where its reader looks under extension.<name>.platform.linux: the
#     surface bundle then fails with `undefined symbol gluTessBeginContour`; "platform" is inserted;
#   - the segger bundle (its source lies only on RBVI's server) and the MMTF bundle (a retired
#     format; its build downloads mmtf-cpp and msgpack) are left out;
#   - a venv on Debian's python3.11 with a copied interpreter and system site packages (else
#     ChimeraX's `devel install`, how SessionStates is installed, refuses), ChimeraX's pinned
#     build tools, every optional dependency of its pyproject.toml but openmm-cuda-12, its
#     PyQt6 pins and its patches to pip packages (but openmm's metadata patch);
#   - `cxservices` (RBVI's REST client for update checks and web services, only on RBVI's
#     server) is a stub whose calls raise.
#
# Where: $CODA_CHIMERAX_DIR if set; else /var/lib/coda/chimerax as root (following
# CODA_EMBEDDED_ROOT); else ~/.cache/coda/chimerax. <key> hashes the archives' checksums and
# this script, so a change of either builds anew. A lock serialises runs. The source tree and
# uv's cache (about 2.5 GB) are removed after the install; the prefix is about 1.7 GB.
# Jobs: CODA_CHIMERAX_JOBS (default: the core count).
set -euo pipefail

CX_REPO=https://github.com/RBVI/ChimeraX.git
CX_COMMIT=6911d7bfe24481786001e8fa6a06ca3fd139cabe
CX_ARCHIVE=chimerax-6911d7bf-src.tar.xz
CX_SHA256=d3a249c01a09bb8c6026c94c7df2e7fbde5d19199338ee9e89d0ddfb9ba41a2f
STATES_REPO=https://github.com/ShiinaHiiragi/chimerax-states.git
STATES_COMMIT=f62393c230f08075f10fa58765ca6a1a221033ce
STATES_ARCHIVE=chimerax-states-f62393c2.tar.xz
STATES_SHA256=7fed5d049942398b0a745ec035fe370fca1db82a46aa221aaa793d9de3557042
# ChimeraX's pinned build tools (prereqs/Python/Makefile) and PyQt (prereqs/PyQt/Makefile)
BUILD_TOOLS=(pip==25.2 wheel==0.45.1 setuptools==80.9.0 build==1.3.0 uv==0.9.30)
PYQT=(PyQt6==6.10.2 PyQt6-Qt6==6.10.1 PyQt6-sip==13.10.3 PyQt6-WebEngine==6.10.0
  PyQt6-WebEngine-Qt6==6.10.1)
DEBS=(g++ gcc make cmake patch xz-utils git python3.11 python3.11-dev python3.11-venv patchelf
  gfortran bc rsync unzip autoconf automake libtool libfftw3-dev libhdf5-dev libosmesa6-dev
  libegl1-mesa-dev libgl1-mesa-dev libglu1-mesa-dev libxkbcommon-x11-0 libxcb-cursor0
  libxcb-xinerama0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0
  libxcb-render-util0 libxcb-shape0 libxcb-xkb1 libnss3 libxcomposite1 libxdamage1 libxrandr2
  libxtst6 libxss1 libasound2 libdbus-1-3 libfontconfig1 libxkbfile1)

say() { echo "chimerax: $*" >&2; }

if [ -n "${CODA_CHIMERAX_DIR:-}" ]; then
  root="$CODA_CHIMERAX_DIR"
elif [ "$(id -u)" = 0 ]; then
  root="${CODA_EMBEDDED_ROOT:-/var/lib/coda}/chimerax"
else
  root="${XDG_CACHE_HOME:-$HOME/.cache}/coda/chimerax"
fi
key="$( { echo "$CX_SHA256 $STATES_SHA256"; cat "$0"; } | sha256sum | cut -c1-12)"
prefix="$root/$key"
done_mark() { [ -f "$prefix/.built" ] && [ -x "$prefix/bin/chimerax" ]; }
if done_mark; then echo "$prefix"; exit 0; fi

mkdir -p "$root"
exec 9>"$root/.build.lock"
flock 9
if done_mark; then echo "$prefix"; exit 0; fi
started=$SECONDS
phase_start=$SECONDS
phase() {  # phase <name>: closes the previous phase's timing
  say "  ($((SECONDS - phase_start)) s)"
  phase_start=$SECONDS
  say "$*"
}

say "building ChimeraX into $prefix (20-30 minutes on 2 cores)"
say "Debian packages ..."
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
    say "needs Debian's ${missing[*]}: run 'sudo bash scripts/chimerax.sh'"
    exit 1
  fi
  say "installing ${missing[*]} (Debian) ..."
  export DEBIAN_FRONTEND=noninteractive
  # waits for another apt (scripts/test.sh builds Celestia beside it)
  apt=(apt-get -o DPkg::Lock::Timeout=900)
  "${SUDO[@]}" "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    "${SUDO[@]}" "${apt[@]}" update -qq >&2
    "${SUDO[@]}" "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  }
fi

work="$root/$key.build"  # kept when a build fails (a rerun starts the failed phase anew)
mkdir -p "$work"
# fetch <archive> <sha256> <repo> <commit> <dest>: the archive's tree (top folder stripped) in dest
fetch() {
  local archive="$1" sha="$2" repo="$3" commit="$4" dest="$5" src="${CODA_CHIMERAX_SOURCES:-}"
  rm -rf "$dest"
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
    # ChimeraX's build info reads last-commit where there is no .git
    { echo "branch: develop"; git -C "$dest.git" log -1 --pretty=fuller FETCH_HEAD; } >"$dest/last-commit"
    rm -rf "$dest.git"
  else
    say "no sources: set CODA_CHIMERAX_SOURCES to a folder with $archive (sha256 $sha), or go online"
    exit 1
  fi
}

phase "sources and fixes ..."
if [ ! -f "$work/src/.fixed" ]; then
  fetch "$CX_ARCHIVE" "$CX_SHA256" "$CX_REPO" "$CX_COMMIT" "$work/src"
  fetch "$STATES_ARCHIVE" "$STATES_SHA256" "$STATES_REPO" "$STATES_COMMIT" "$work/states"
  bb="$work/src/src/bundles/bundle_builder/src/__init__.py"
  sed -i -E 's/\.join\(\[e\.get\("name"\), "(win32|mac|linux)"\]\)/.join([e.get("name"), "platform", "\1"])/' "$bb"
  n="$(grep -c '"platform", "\(win32\|mac\|linux\)"' "$bb" || true)"
  [ "$n" = 3 ] || { say "bundle_builder fix: $n of 3 names changed"; exit 1; }
  mk="$work/src/src/bundles/Makefile"
  sed -i -E 's/(\s)(segger|mmtf)(\s)/\1\3/' "$mk"
  if grep -qE '(\s)(segger|mmtf)(\s|$)' "$mk"; then say "could not drop segger/mmtf from $mk"; exit 1; fi
  touch "$work/src/.fixed"
fi

venv="$prefix/venv"
py="$venv/bin/python"
phase "venv on Debian's python3.11 and ChimeraX's build tools ..."
rm -rf "$prefix"
mkdir -p "$prefix/bin" "$prefix/share"
/usr/bin/python3.11 -m venv "$venv"
rm -f "$venv/bin/python3.11"
cp /usr/bin/python3.11 "$venv/bin/python3.11"
sed -i 's/^include-system-site-packages = .*/include-system-site-packages = true/' "$venv/pyvenv.cfg"
"$py" -m pip install -q --disable-pip-version-check "${BUILD_TOOLS[@]}" >&2
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" UV_CACHE_DIR="$work/uv-cache" UV_LINK_MODE=copy
export UV_PYTHON="$py" PYTHONNOUSERSITE=1 HOME="$work/home" LANG=C.UTF-8 LC_ALL=C.UTF-8
mkdir -p "$HOME"
site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

phase "Python dependencies (pyproject.toml's extras but openmm-cuda-12; PyQt6) ..."
"$py" - "$work/src/pyproject.toml" >"$work/requirements.txt" <<'EOF'
import sys, tomllib
extras = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]
seen = set()
for reqs in extras.values():
    for r in reqs:
        if r.replace(" ", "").lower().startswith("openmm-cuda") or r in seen:
            continue
        seen.add(r)
        print(r)
EOF
uv pip install -q -r "$work/requirements.txt" >&2
uv pip install -q "${PYQT[@]}" >&2
for p in tcia_utils.patch tcia_utils_metadata.patch grako.patch; do
  say "patch $p (site-packages)"
  patch --ignore-whitespace -s -d "$site" -N -p0 <"$work/src/prereqs/pips/$p" >&2
done

# cxservices: RBVI's REST client, imported lazily for update checks and web services; the
# names ChimeraX imports, whose calls raise (no network service is reached from here)
mkdir -p "$site/cxservices/api"
cat >"$site/cxservices/__init__.py" <<'EOF'
"""Stub of RBVI's cxservices (written by CODA's scripts/chimerax.sh): no web services."""
__version__ = "0.0+coda.stub"
EOF
cat >"$site/cxservices/rest.py" <<'EOF'
class ApiException(Exception):
    def __init__(self, status=None, reason="cxservices is a stub: no web services", *a, **k):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.body = None
        self.headers = None
EOF
cat >"$site/cxservices/configuration.py" <<'EOF'
class Configuration:
    def __init__(self, *args, **kwargs):
        self.host = ""
        self.verify_ssl = True
        self.proxy = None
EOF
cat >"$site/cxservices/api_client.py" <<'EOF'
from .rest import ApiException


class ApiClient:
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        def unavailable(*args, **kwargs):
            raise ApiException(reason="cxservices is a stub: no web services")
        return unavailable
EOF
cat >"$site/cxservices/api/__init__.py" <<'EOF'
from .default_api import DefaultApi  # noqa: F401
EOF
cat >"$site/cxservices/api/default_api.py" <<'EOF'
from ..api_client import ApiClient


class DefaultApi(ApiClient):
    pass
EOF
cat >"$site/cxservices/models.py" <<'EOF'
def __getattr__(name):
    raise AttributeError(f"cxservices is a stub: no model {name}")
EOF

jobs="${CODA_CHIMERAX_JOBS:-$(nproc)}"
log="$work/make.log"
phase "building bundle_builder, core, toolshed_utils (log: $log) ..."
cd "$work/src"
{
  make build-dirs
  make -C src/bundles/bundle_builder uv-build PYTHON=python
  make -C src/bundles/core uv-build PYTHON=python
  make -C src/bundles/toolshed_utils uv-build PYTHON=python
} >"$log" 2>&1 || { tail -40 "$log" >&2; say "build failed (log: $log)"; exit 1; }
phase "building ChimeraX's bundles with $jobs jobs (the long part) ..."
set +e
nice -n 10 make -C src/bundles -k -j "$jobs" uv-build PYTHON=python >>"$log" 2>&1 &
mpid=$!
while kill -0 "$mpid" 2>/dev/null; do
  sleep 60
  say "  $(find build/sync -name '*.whl' 2>/dev/null | wc -l) wheels after $((SECONDS - phase_start)) s"
done
wait "$mpid"
rc=$?
set -e
if [ "$rc" != 0 ]; then
  grep -E "Error|error:" "$log" | tail -30 >&2
  say "bundle build failed (log: $log)"
  exit 1
fi
phase "installing $(find build/sync -name '*.whl' | wc -l) wheels ..."
(cd build/sync && uv pip install -q ./*.whl) >&2
"$py" -m chimerax.core --exit --nogui --silent --cmd "toolshed reload installed" >&2

# the launcher: software GL, no Chromium sandbox, a writable HOME, a 0700 XDG_RUNTIME_DIR, no
# network;
# ChimeraX refuses to keep settings as root (HOME=/do/not/run/as/root), so as root it is told
# another uid before it starts (run it as the desktop's user where there is one)
cat >"$prefix/bin/chimerax" <<EOF
#!/bin/sh
# ChimeraX (built by CODA's scripts/chimerax.sh from RBVI's sources; non-commercial licence)
export LIBGL_ALWAYS_SOFTWARE=1 QTWEBENGINE_DISABLE_SANDBOX=1
export QTWEBENGINE_CHROMIUM_FLAGS="\${QTWEBENGINE_CHROMIUM_FLAGS:---no-sandbox}"
uid=\$(id -u)
if [ -z "\${HOME:-}" ] || [ ! -w "\$HOME" ]; then
  export HOME="\${TMPDIR:-/tmp}/coda-chimerax-home-\$uid"
  mkdir -p "\$HOME"
fi
if [ -z "\${XDG_RUNTIME_DIR:-}" ] || [ ! -w "\$XDG_RUNTIME_DIR" ]; then
  export XDG_RUNTIME_DIR="\${TMPDIR:-/tmp}/coda-chimerax-runtime-\$uid"
  mkdir -p "\$XDG_RUNTIME_DIR"
fi
chmod 0700 "\$XDG_RUNTIME_DIR" 2>/dev/null || true
# no network: downloads go to a closed port, so fetches come from ~/Downloads/ChimeraX only
# (CODA_CHIMERAX_ONLINE=1 lets it fetch)
if [ "\${CODA_CHIMERAX_ONLINE:-0}" != 1 ]; then
  export http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 no_proxy=127.0.0.1,localhost
  export HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost
fi
if [ "\$uid" = 0 ]; then
  exec "$py" -c 'import os, runpy; os.getuid = lambda: 65534; runpy.run_module("chimerax.core", run_name="__main__", alter_sys=True)' "\$@"
fi
exec "$py" -m chimerax.core "\$@"
EOF
chmod 0755 "$prefix/bin/chimerax"

phase "SessionStates (ScienceBoard's states command) ..."
# built into a wheel and installed into the venv (`devel install` would install it into the
# building user's HOME only); its source stays beside the build
cp -a "$work/states" "$prefix/share/chimerax-states"
"$prefix/bin/chimerax" --nogui --exit --silent --cmd "devel build $work/states" >"$work/states.log" 2>&1 </dev/null \
  && [ -n "$(find "$work/states/dist" -name '*.whl' 2>/dev/null)" ] \
  || { tail -30 "$work/states.log" >&2; say "devel build of SessionStates failed"; exit 1; }
uv pip install -q --no-deps "$work"/states/dist/*.whl >&2
"$py" -m chimerax.core --exit --nogui --silent --cmd "toolshed reload installed" >&2 </dev/null
mkdir -p "$work/fresh-home"
listed="$(HOME="$work/fresh-home" "$prefix/bin/chimerax" --nogui --exit --cmd "toolshed list" </dev/null 2>&1 || true)"
grep -q "SessionStates (0.4)" <<<"$listed" || {
  echo "$listed" | tail -20 >&2
  say "toolshed list (a fresh HOME) does not show SessionStates (0.4)"
  exit 1
}

phase "removing the source tree and uv's cache ($(du -sh "$work" | cut -f1)) ..."
cd /
rm -rf "$work"
touch "$prefix/.built"
say "  ($((SECONDS - phase_start)) s)"
say "built and installed in $((SECONDS - started)) s: $prefix ($(du -sh "$prefix" | cut -f1))"
echo "$prefix"
