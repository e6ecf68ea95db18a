#!/usr/bin/env bash
# Fetch Ray's doc_code files (doc/source/{train,tune}/doc_code) at the installed Ray's commit into
# the examples runner's cache (bench/ray_examples.py). PyPI's wheel has no docs, so they come from
# Ray's git repository; nothing of Ray's is copied into this repository.
#
#   scripts/fetch_ray_doc_code.sh                  # a shallow, sparse clone of the tag ray-<version>
#   scripts/fetch_ray_doc_code.sh --git-dir DIR    # from a Ray git directory you already have
#   scripts/fetch_ray_doc_code.sh --from-dir DIR [--manifest FILE]
#                                                  # from a folder laid out as Ray's repository
#                                                  # (DIR/doc/source/{train,tune}/doc_code/*.py) with
#                                                  # a manifest of path<TAB>commit lines saying which
#                                                  # commit each file was taken at (default
#                                                  # DIR/COMMITS.tsv); every file must be listed
#
# Cache: $TRAINWIRE_RAY_SRC, else ~/.cache/trainwire/ray-src (the runner's --ray-src default). The
# cache gets COMMITS.tsv (path<TAB>commit, one line a file: the runner names in the table each file
# that is not at the installed Ray's commit) and SOURCE (one line saying where the files came from).
set -euo pipefail

PYTHON="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
DEST="${TRAINWIRE_RAY_SRC:-$HOME/.cache/trainwire/ray-src}"
PATHS=(doc/source/train/doc_code doc/source/tune/doc_code)
read -r VERSION COMMIT < <("$PYTHON" -c "import ray._version as v; print(v.version, v.commit)")

GIT_DIR_ARG=""
FROM_DIR=""
MANIFEST=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --git-dir) GIT_DIR_ARG="${2:?--git-dir needs a directory}"; shift 2 ;;
    --from-dir) FROM_DIR="${2:?--from-dir needs a directory}"; shift 2 ;;
    --manifest) MANIFEST="${2:?--manifest needs a file}"; shift 2 ;;
    *) echo "unknown argument: $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [[ -n "$GIT_DIR_ARG" && -n "$FROM_DIR" ]]; then
  echo "--git-dir and --from-dir exclude each other" >&2; exit 2
fi
if [[ -n "$MANIFEST" && -z "$FROM_DIR" ]]; then
  echo "--manifest goes with --from-dir" >&2; exit 2
fi

# Every file of the fetched tree at one commit (the git ways): the manifest says so line by line.
write_manifest_one_commit() {
  local used="$1"
  (cd "$DEST.tmp" && find "${PATHS[@]}" -type f -name '*.py' 2>/dev/null | LC_ALL=C sort) |
    while read -r path; do printf '%s\t%s\n' "$path" "$used"; done > "$DEST.tmp/COMMITS.tsv"
}

CLONE=""
# A failed fetch leaves the cache as it was: the new tree is built beside it and moved in at the end.
trap 'rm -rf "$DEST.tmp" ${CLONE:+"$CLONE"}' EXIT
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
if [[ -n "$FROM_DIR" ]]; then
  MANIFEST="${MANIFEST:-$FROM_DIR/COMMITS.tsv}"
  [[ -f "$MANIFEST" ]] || { echo "no manifest $MANIFEST: say which commit each file came from" >&2; exit 1; }
  # Only the .py files of the two folders, byte for byte; each must have a line in the manifest.
  (cd "$FROM_DIR" && find "${PATHS[@]}" -type f -name '*.py' 2>/dev/null | LC_ALL=C sort) > "$DEST.tmp/.files"
  [[ -s "$DEST.tmp/.files" ]] || { echo "no doc_code .py files under $FROM_DIR" >&2; exit 1; }
  : > "$DEST.tmp/COMMITS.tsv"
  while read -r path; do
    used="$(awk -F'\t' -v p="$path" '$1 == p && $2 ~ /^[0-9a-f]+$/ {print $2; exit}' "$MANIFEST")"
    [[ -n "$used" ]] || { echo "$path has no commit in $MANIFEST" >&2; exit 1; }
    mkdir -p "$DEST.tmp/$(dirname "$path")"
    cp "$FROM_DIR/$path" "$DEST.tmp/$path"
    printf '%s\t%s\n' "$path" "$used" >> "$DEST.tmp/COMMITS.tsv"
  done < "$DEST.tmp/.files"
  rm "$DEST.tmp/.files"
  TOTAL="$(wc -l < "$DEST.tmp/COMMITS.tsv")"
  OTHER="$(awk -F'\t' -v c="$COMMIT" '$2 != c' "$DEST.tmp/COMMITS.tsv" | wc -l)"
  if [[ "$OTHER" -eq 0 ]]; then
    echo "Ray $VERSION's commit $COMMIT" > "$DEST.tmp/SOURCE"
  else
    COMMITS="$(awk -F'\t' -v c="$COMMIT" '$2 != c {print $2}' "$DEST.tmp/COMMITS.tsv" | sort -u | wc -l)"
    echo "$OTHER of $TOTAL files at $COMMITS other commits than Ray $VERSION's own $COMMIT (COMMITS.tsv)" \
      > "$DEST.tmp/SOURCE"
  fi
elif [[ -n "$GIT_DIR_ARG" ]]; then
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
  git clone --quiet --depth 1 --filter=blob:none --sparse --branch "ray-$VERSION" \
    https://github.com/ray-project/ray.git "$CLONE/ray"
  git -C "$CLONE/ray" sparse-checkout set "${PATHS[@]}"
  USED="$(git -C "$CLONE/ray" rev-parse HEAD)"
  for p in "${PATHS[@]}"; do
    mkdir -p "$DEST.tmp/$(dirname "$p")" && cp -r "$CLONE/ray/$p" "$DEST.tmp/$p"
  done
fi
if [[ -z "$FROM_DIR" ]]; then
  write_manifest_one_commit "$USED"
  if [[ "$USED" == "$COMMIT" ]]; then
    echo "Ray $VERSION's commit $USED" > "$DEST.tmp/SOURCE"
  else
    echo "commit $USED (not Ray $VERSION's own $COMMIT)" > "$DEST.tmp/SOURCE"
  fi
fi
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
echo "doc_code of $(cat "$DEST/SOURCE") in $DEST ($(wc -l < "$DEST/COMMITS.tsv") files)"
