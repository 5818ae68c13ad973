#!/usr/bin/env bash
# Runs every GPU test and GPU benchmark of a bundle made by make_gpu_bundle.sh, in one go.
#   run_gpu_suite.sh RESULTS_DIR [DATA_DIR]
# DATA_DIR (the test fixtures): the bundle's data/ if present, else $ACTORSERVE_TEST_DATA.
# Writes RESULTS_DIR/summary.txt, one log per program, and gtest XML files.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run_gpu_suite.sh RESULTS_DIR [DATA_DIR]}
mkdir -p "$out"
data=${2:-${ACTORSERVE_TEST_DATA:-$here/data}}
export ACTORSERVE_TEST_DATA=$data
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# NCCL (tensor parallelism's collectives, opened at run time; the bundle does not carry its
# 200 MB): the CUDA installation's or the system's, else that of the Python package nvidia-nccl
# that GPU images with PyTorch carry.
if [[ ! -f /usr/local/cuda/lib64/libnccl.so.2 ]] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2'; then
  nccl_dir=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n $nccl_dir && -f $nccl_dir/libnccl.so.2 ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_dir"
fi
summary="$out/summary.txt"
{
  echo "commit: $(cat "$here/COMMIT" 2>/dev/null)"
  echo "host: $(hostname) $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader 2>/dev/null || echo "nvidia-smi: unavailable"
  echo "nccl: ${nccl_dir:-the CUDA installation's or the system's}"
} > "$summary"
status=0
# GPU tests: every test binary whose name marks it as CUDA/GPU, plus the filter in GPU_TESTS.
for t in "$here"/bin/test_*; do
  name=$(basename "$t")
  case "$name" in test_cuda*|test_gpu*) ;; *) [[ " ${GPU_TESTS:-} " == *" $name "* ]] || continue ;; esac
  echo "== $name" | tee -a "$summary"
  "$t" --gtest_output="xml:$out/$name.xml" > "$out/$name.log" 2>&1
  rc=$?
  # the totals first (gtest prints them last, after many detail lines), then the details
  grep -E '^\[==========\] .* ran|^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?' "$out/$name.log" | tee -a "$summary"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|max abs|error|device 0' "$out/$name.log" | head -40 | tee -a "$summary"
  (( rc == 0 )) || { status=1; echo "   -> FAILED (rc=$rc)" | tee -a "$summary"; }
done
# test_cuda from compute_80 PTX alone (make_gpu_bundle.sh --with-jit): the driver JIT-compiles
# each kernel on first use, so SHARDS processes (default 3) share the work and its disk cache.
if [[ -x "$here/bin-jit/test_cuda" ]]; then
  echo "== test_cuda (compute_80 PTX through the driver's JIT)" | tee -a "$summary"
  export CUDA_CACHE_MAXSIZE=4294967296
  shards=${SHARDS:-3} pids=()
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$here/bin-jit/test_cuda" > "$out/test_cuda_jit.$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < shards; ++i)); do
    wait "${pids[$i]}" || { status=1; echo "   -> shard $i FAILED" | tee -a "$summary"; }
    grep -E '^\[==========\] .* ran|^\[  (PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?|^\[  FAILED  \] [A-Za-z]' \
      "$out/test_cuda_jit.$i.log" | tee -a "$summary"
  done
fi
# GPU benchmarks: bench_cuda_* programs, each given the results dir.
for b in "$here"/bin/bench_cuda_*; do
  [[ -x "$b" ]] || continue
  name=$(basename "$b")
  echo "== $name" | tee -a "$summary"
  "$b" --out "$out" > "$out/$name.log" 2>&1
  rc=$?
  tail -40 "$out/$name.log" | tee -a "$summary"
  (( rc == 0 )) || { status=1; echo "   -> FAILED (rc=$rc)" | tee -a "$summary"; }
done
# End-to-end tests against the CUDA executor, when the bundle carries node (--with-node).
if [[ -x "$here/bin/node" && -d "$here/e2e" ]]; then
  echo "== e2e (openai + ws clients, --device cuda)" | tee -a "$summary"
  (cd "$here/e2e" && ACTORSERVE_BIN="$here/bin/actorserve" ACTORSERVE_E2E_DEVICE=cuda \
     "$here/bin/node" --test --test-concurrency=1 e2e.test.mjs chat_api.test.mjs moe.test.mjs deepseek.test.mjs) > "$out/e2e_cuda.log" 2>&1
  rc=$?
  grep -E '^# (tests|pass|fail)|^not ok' "$out/e2e_cuda.log" | tee -a "$summary"
  (( rc == 0 )) || { status=1; echo "   -> FAILED (rc=$rc)" | tee -a "$summary"; }
fi
echo "gpu suite exit status: $status" | tee -a "$summary"
exit $status
