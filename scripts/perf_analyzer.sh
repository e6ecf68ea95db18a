#!/usr/bin/env bash
# Triton's Performance Analyzer (perf_analyzer), set up apart from the project and run with the given arguments.
#
#   scripts/perf_analyzer.sh -m MODEL -u 127.0.0.1:8001 -i grpc --concurrency-range 1:8:2 ...
#   scripts/perf_analyzer.sh --setup-only     # download and unpack, then print the command line
#
# PyPI's perf-analyzer 2.60.0 wheels are tagged manylinux_2_38 (glibc 2.38); on an older glibc
# (Debian 12 has 2.36) a plain `pip install perf-analyzer` silently takes the 0.1.0 placeholder,
# which has no binary. So this script:
#   1. downloads the 2.60.0 wheel for manylinux_2_38_x86_64 and unpacks its binary;
#   2. downloads Debian 13's libc6, libstdc++6 and libgcc-s1 with apt-get, through a private sources
#      list and private state (the host's apt configuration and packages are not touched), and
#      unpacks them with dpkg-deb;
#   3. starts the binary through that folder's dynamic loader with that folder's libraries.
# Everything lives under ~/.cache/trainwire/perf_analyzer (TRAINWIRE_PERF_ANALYZER_HOME), never in
# the project's virtualenv: it is a benchmark tool, not a dependency.
set -euo pipefail

HOME_DIR="${TRAINWIRE_PERF_ANALYZER_HOME:-$HOME/.cache/trainwire/perf_analyzer}"
VERSION="${PERF_ANALYZER_VERSION:-2.60.0}"
DEBIAN_SUITE="${DEBIAN_SUITE:-trixie}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PYTHON="${PYTHON:-python3}"
ROOT="$HOME_DIR/root"     # the unpacked Debian 13 libraries
BIN_DIR="$HOME_DIR/wheel" # the unpacked wheel

log() { echo "perf_analyzer.sh: $*" >&2; }

find_binary() {
  find "$BIN_DIR" -type f -name perf_analyzer -perm -u+x 2>/dev/null | head -n1
}

setup_wheel() {
  [[ -n "$(find_binary)" ]] && return
  mkdir -p "$HOME_DIR/download" "$BIN_DIR"
  log "downloading perf-analyzer $VERSION (manylinux_2_38_x86_64)"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_38_x86_64 \
    --python-version 3.11 -d "$HOME_DIR/download" "perf-analyzer==$VERSION"
  local wheel
  wheel="$(ls "$HOME_DIR"/download/perf_analyzer-"$VERSION"-*.whl | head -n1)"
  "$PYTHON" -m zipfile -e "$wheel" "$BIN_DIR"
  find "$BIN_DIR" -type f -name perf_analyzer -exec chmod u+x {} +
  [[ -n "$(find_binary)" ]] || { log "no perf_analyzer binary in $wheel"; exit 1; }
}

setup_libraries() {
  [[ -x "$ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" || -x "$ROOT/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ]] &&
    return
  local apt="$HOME_DIR/apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$ROOT"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR $DEBIAN_SUITE main" \
    >"$apt/sources.list"
  local opts=(
    -o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o "Dir::State::Status=/dev/null"
    -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)"
  )
  log "downloading Debian $DEBIAN_SUITE's libc6, libstdc++6, libgcc-s1 (private apt state in $apt)"
  apt-get "${opts[@]}" -qq update
  (cd "$apt/debs" && apt-get "${opts[@]}" -qq download libc6 libstdc++6 libgcc-s1)
  for deb in "$apt"/debs/*.deb; do
    dpkg-deb -x "$deb" "$ROOT"
  done
}

loader() {
  local candidate
  for candidate in "$ROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$ROOT/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"; do
    [[ -e "$candidate" ]] && { echo "$candidate"; return; }
  done
  log "no dynamic loader under $ROOT"
  exit 1
}

setup_wheel
setup_libraries
BIN="$(find_binary)"
# The wheel's own libraries (if any) first, then Debian 13's.
LIBS="$(dirname "$BIN"):$(dirname "$BIN")/../lib:$ROOT/usr/lib/x86_64-linux-gnu:$ROOT/lib/x86_64-linux-gnu"
CMD=("$(loader)" --library-path "$LIBS" "$BIN")

if [[ "${1:-}" == "--setup-only" ]]; then
  printf '%q ' "${CMD[@]}"
  echo
  exit 0
fi
exec "${CMD[@]}" "$@"
