#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR). CUDA is built when nvcc is present.
# Extra arguments go to cmake, e.g. -DACTORSERVE_SANITIZE=address.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja "$@" >/dev/null
ninja -C "$build" -j"${JOBS:-$(nproc)}"
