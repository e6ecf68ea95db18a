#!/usr/bin/env bash
# Fetch Ray's doc_code files (doc/source/{train,tune}/doc_code) at the installed Ray's commit into
# the examples runner's cache (bench/ray_examples.py). PyPI's wheel has no docs, so they come from
# Ray's git repository; nothing of Ray's is copied into this repository.
#
#   scripts/fetch_ray_doc_code.sh                  # a shallow, sparse clone of the tag ray-<version>
#   scripts/fetch_ray_doc_code.sh --git-dir DIR    # from a Ray git directory you already have
#
# Cache: $TRAINWIRE_RAY_SRC, else ~/.cache/trainwire/ray-src (the runner's --ray-src default).
set -euo pipefail

PYTHON="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
DEST="${TRAINWIRE_RAY_SRC:-$HOME/.cache/trainwire/ray-src}"
PATHS=(doc/source/train/doc_code doc/source/tune/doc_code)
read -r VERSION COMMIT < <("$PYTHON" -c "import ray._version as v; print(v.version, v.commit)")

GIT_DIR_ARG=""
if [[ "${1:-}" == "--git-dir" ]]; then
  GIT_DIR_ARG="${2:?--git-dir needs a directory}"
fi

rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
if [[ -n "$GIT_DIR_ARG" ]]; then
  # The exact commit if the git directory has it, else say which commit was used instead.
  if git --git-dir "$GIT_DIR_ARG" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    USED="$COMMIT"
  else
    USED="$(git --git-dir "$GIT_DIR_ARG" rev-parse HEAD)"
    echo "commit $COMMIT of Ray $VERSION is not in $GIT_DIR_ARG; using its HEAD $USED" >&2
  fi
  git --git-dir "$GIT_DIR_ARG" archive "$USED" "${PATHS[@]}" | tar -x -C "$DEST.tmp"
else
  CLONE="$(mktemp -d)"
  trap 'rm -rf "$CLONE"' EXIT
  git clone --quiet --depth 1 --filter=blob:none --sparse --branch "ray-$VERSION" \
    https://github.com/ray-project/ray.git "$CLONE/ray"
  git -C "$CLONE/ray" sparse-checkout set "${PATHS[@]}"
  USED="$(git -C "$CLONE/ray" rev-parse HEAD)"
  for p in "${PATHS[@]}"; do
    mkdir -p "$DEST.tmp/$(dirname "$p")" && cp -r "$CLONE/ray/$p" "$DEST.tmp/$p"
  done
fi
if [[ "$USED" == "$COMMIT" ]]; then
  echo "Ray $VERSION's commit $USED" > "$DEST.tmp/SOURCE"
else
  echo "commit $USED (not Ray $VERSION's own $COMMIT)" > "$DEST.tmp/SOURCE"
fi
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
echo "doc_code of $(cat "$DEST/SOURCE") in $DEST"
