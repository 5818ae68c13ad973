#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (ctest). GPU tests skip without a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" "$@"
built=$(date +%s)
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure -j"${JOBS:-$(nproc)}" --timeout 900
echo "test.sh: build $((built - start)) s, tests $(( $(date +%s) - built )) s"
