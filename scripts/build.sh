#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR). CUDA is built when nvcc is present.
# Extra arguments go to cmake, e.g. -DACTORSERVE_SANITIZE=address. TARGETS="a b" builds only
# those targets (default: everything).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja "$@" >/dev/null
# shellcheck disable=SC2086  # TARGETS is a list
ninja -C "$build" -j"${JOBS:-$(nproc)}" ${TARGETS:-}
