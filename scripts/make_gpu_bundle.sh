#!/usr/bin/env bash
# Builds actorserve with CUDA for sm_90a and packs the executables (server, tests, benchmarks)
# plus the non-system shared libraries they need into one relocatable folder. A GPU host needs
# only the NVIDIA driver and the CUDA 13 runtime/cuBLAS (found through ldconfig or /usr/local/cuda).
#
#   scripts/make_gpu_bundle.sh [--with-data] [--with-node] [BUNDLE_DIR=.gpu_bundle] [BUILD_DIR=build-gpu]
#   TARGETS="test_cuda bench_cuda_kernels" scripts/make_gpu_bundle.sh   # build and pack only these
#   PACK=out.tar.xz scripts/make_gpu_bundle.sh                          # also pack it, xz -9: its 64 MiB window
#   finds the device code every executable repeats (test_cuda + test_cuda_engine + four benches: 10 MB, not 17)
# --with-node adds this machine's node binary and tests/e2e (with node_modules), so the
# end-to-end tests (openai + ws clients) run on hosts without Node.js.
# --with-jit adds bin-jit/test_cuda, built from compute_80 PTX alone (BUILD_DIR-ptx80): on any
# newer GPU the driver JIT-compiles every kernel, the portable ones included (issue 39's check
# that a GPU newer than the build list runs; docs/gpus.md).
#
# Then on the GPU host:   BUNDLE_DIR/run_gpu_suite.sh RESULTS_DIR
set -euo pipefail
with_data=0 with_node=0 with_jit=0
while [[ "${1:-}" == --with-* ]]; do
  case "$1" in
    --with-data) with_data=1 ;;
    --with-node) with_node=1 ;;
    --with-jit) with_jit=1 ;;
    *) echo "make_gpu_bundle: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-$root/.gpu_bundle}
build=${2:-$root/build-gpu}
jobs=${JOBS:-2}

[[ -x /usr/local/cuda/bin/nvcc ]] || { echo "make_gpu_bundle: nvcc not found at /usr/local/cuda/bin/nvcc" >&2; exit 1; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACTORSERVE_ENABLE_CUDA=ON \
      -DACTORSERVE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90a}" >/dev/null
# shellcheck disable=SC2086
ninja -C "$build" -j"$jobs" ${TARGETS:-}

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
shopt -s nullglob
exes=("$build/server/actorserve" "$build"/tests/test_* "$build"/bench/bench_*)
if [[ -n "${TARGETS:-}" ]]; then  # only what was asked for (a small bundle to carry to the GPU host)
  exes=()
  for t in $TARGETS; do exes+=("$build/server/$t" "$build/tests/$t" "$build/bench/$t"); done
fi
for exe in "${exes[@]}"; do
  [[ -x "$exe" && -f "$exe" ]] || continue
  cp "$exe" "$bundle/bin/"
  strip --strip-debug "$bundle/bin/$(basename "$exe")"
done
# Shared libraries: everything ldd resolves except the C/C++ runtime and the CUDA/driver
# libraries, which the GPU host provides.
system_re='^(linux-vdso|libc\.|libm\.|libdl\.|librt\.|libpthread\.|ld-linux|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas\.|libcublasLt\.|libnvidia)'
for exe in "$bundle"/bin/*; do
  ldd "$exe" | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  name=$(basename "$lib")
  [[ "$name" =~ $system_re ]] && continue
  cp -L "$lib" "$bundle/lib/$name"
done
if (( with_jit )); then
  cmake -S "$root" -B "$build-ptx80" -G Ninja -DCMAKE_BUILD_TYPE=Release -DACTORSERVE_ENABLE_CUDA=ON \
        -DACTORSERVE_CUDA_ARCHITECTURES=80 >/dev/null
  ninja -C "$build-ptx80" -j"$jobs" test_cuda
  mkdir -p "$bundle/bin-jit"
  cp "$build-ptx80/tests/test_cuda" "$bundle/bin-jit/"
  strip --strip-debug "$bundle/bin-jit/test_cuda"
fi
cp "$root/scripts/run_gpu_suite.sh" "$root/scripts/bench_gpu_suite.sh" "$root/scripts/bench_targets.sh" "$bundle/"
if (( with_data )); then cp -r "$root/tests/data" "$bundle/data"; fi
if (( with_node )); then
  [[ -d "$root/tests/e2e/node_modules" ]] || (cd "$root/tests/e2e" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$(command -v node)" "$bundle/bin/node"
  mkdir -p "$bundle/e2e"
  cp "$root"/tests/e2e/*.mjs "$root/tests/e2e/package.json" "$bundle/e2e/"
  cp -r "$root/tests/e2e/node_modules" "$bundle/e2e/"
fi
git -C "$root" rev-parse HEAD > "$bundle/COMMIT" 2>/dev/null || echo unknown > "$bundle/COMMIT"
if [[ -n "${PACK:-}" ]]; then
  tar -C "$(dirname "$bundle")" -cf - "$(basename "$bundle")" | xz -T"$jobs" -9 > "$PACK"
  echo "packed: $PACK ($(du -sh "$PACK" | cut -f1))"
fi
echo "bundle: $bundle ($(du -sh "$bundle" | cut -f1)); libs: $(ls "$bundle/lib" | tr '\n' ' ')"
