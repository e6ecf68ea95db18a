#!/usr/bin/env bash
# Builds Horovod (torch + gloo; no MPI, TensorFlow or MXNet) from its PyPI sdist, with the C++17
# patches torch 2.x headers need, into a wheel cache keyed by the Python and torch versions, and
# installs that wheel into the venv. A second run (or a fresh venv) reuses the cached wheel.
#
#   scripts/build_horovod.sh            # PY=.venv/bin/python, cache ~/.cache/trainwire/wheels/
#   PY=/path/to/python HOROVOD_WHEEL_CACHE=/dir scripts/build_horovod.sh
set -euo pipefail

VERSION=0.28.1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
# Outside the checkout, as pip keeps its wheels: a fresh clone on the same machine (CI) reuses the build.
CACHE=${HOROVOD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainwire/wheels}

# torch's C++ ABI is baked into the extension, so the wheel is only good for this torch.
key=$("$PY" -c 'import sys, torch; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}")')
dir=$CACHE/horovod-$VERSION-$key
wheel=$(ls "$dir"/horovod-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)

if [ -z "$wheel" ]; then
    echo "building horovod $VERSION for $key (several minutes)" >&2
    for tool in cmake g++ make; do
        command -v "$tool" >/dev/null || { apt-get update -qq && apt-get install -y -qq cmake g++ make >/dev/null; break; }
    done
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$VERSION" -d "$work"
    tar -xzf "$work/horovod-$VERSION.tar.gz" -C "$work"
    src=$work/horovod-$VERSION

    # Horovod 0.28.1 compiles with C++14 (gloo with C++11); torch >= 2.1 headers need C++17.
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    sed -i 's/-std=c++11/-std=c++17/g' "$src/third_party/gloo/CMakeLists.txt"
    for f in CMakeLists.txt horovod/torch/CMakeLists.txt; do
        grep -q 'set(CMAKE_CXX_STANDARD 17)' "$src/$f" || { echo "patch failed: $f" >&2; exit 1; }
    done
    grep -q -- '-std=c++17' "$src/third_party/gloo/CMakeLists.txt" \
        || { echo "patch failed: third_party/gloo/CMakeLists.txt" >&2; exit 1; }

    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= \
    MAKEFLAGS="-j$(nproc)" \
        "$PY" -m pip wheel -q --no-build-isolation --no-deps "$src" -w "$work/dist"

    mkdir -p "$dir"
    built=$(ls "$work"/dist/horovod-"$VERSION"-*.whl)
    # Copy then rename, so an interrupted copy never looks like a cached wheel.
    cp "$built" "$dir/.partial"
    wheel=$dir/$(basename "$built")
    mv "$dir/.partial" "$wheel"
fi

# Its runtime deps (cloudpickle, psutil, pyyaml, packaging) come with requirements.txt.
"$PY" -m pip install -q --no-deps --force-reinstall "$wheel"
"$PY" -c 'import horovod.torch as hvd; assert hvd.gloo_built(), "horovod built without gloo"'
echo "horovod $VERSION installed from $wheel" >&2
