#!/usr/bin/env bash
# The test command (README "Testing"; CI runs it through .ci/run): installs dependencies, builds,
# runs the whole test suite (ctest; GPU tests skip without a GPU), then the sanitizer suites and
# the fuzz smoke (scripts/sanitize.sh: ASan+UBSan over all of ctest, TSan over the engine and server
# tests, 60 s per fuzz target). ACTORSERVE_CI_SANITIZERS=0 runs the normal suite only.
# Prints each phase's time. Extra arguments go to cmake for the normal build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
"$root/scripts/install_deps.sh"
"$root/scripts/build.sh" "$@"
built=$(date +%s)
(cd "${BUILD_DIR:-$root/build}" && ctest --output-on-failure -j"${JOBS:-$(nproc)}" --timeout 900)
tested=$(date +%s)
echo "test.sh: build $((built - start)) s, tests $((tested - built)) s"
if [ "${ACTORSERVE_CI_SANITIZERS:-1}" != 0 ]; then
  "$root/scripts/sanitize.sh" all
  echo "test.sh: build $((built - start)) s, tests $((tested - built)) s, sanitizers + fuzz smoke $(( $(date +%s) - tested )) s, total $(( $(date +%s) - start )) s"
fi
