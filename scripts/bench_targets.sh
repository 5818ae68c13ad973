#!/usr/bin/env bash
# The open issues' H200 targets in one run, most wanted first, under one deadline: random-weight
# models written config-only and filled on the device (--load-format dummy: the real shapes'
# timings), measured by bench_gpu_suite.sh's engine stages and by the kernel benchmarks. Each
# part writes its own directory (bench_gpu_suite.sh's result files with their provenance
# headers); targets.txt lists every part's figures beside its target.
#
#   bench_targets.sh RESULTS_DIR [PART...]
#
# Parts (all, in this order, unless named):
#   mixtral-single  issue 30: Mixtral-8x7B, single stream 128 in / 256 out       >= 140 tok/s
#   qwen3-offline   issue 30: Qwen3-30B-A3B, offline 1000 x 128 in / 1024 out    >= 15,000 out tok/s
#   dsl-offline     issue 31: DeepSeek-V2-Lite, offline 200 x 1000 in / 100 out  >= 50 req/s
#   dsl-single      issue 31: DeepSeek-V2-Lite, single stream                    >= 400 tok/s
#   mla-kernel      issue 31: bench_cuda_mla's decode kernel table               >= 3.5 TB/s at batch >= 32, KV >= 2048
#   fp8-single      issue 32: Llama-3-8B, FP8 weights and KV cache, single stream >= 430 tok/s
#   fp8-offline     issue 32: the same, 200 x 1000 / 100 and 1000 x 128 / 1024   >= 55 req/s, >= 30,000 out tok/s
#   fp8-attention   issue 32: bench_cuda_attention --fp8-kv                      >= 3,600 GB/s
#   cascade         issue 37: bench_cuda_attention --cascade (>= 8x), then 256 streams behind one
#                   4,096-token prompt with cascade attention on and off (>= 1.5x)
#   qwen3-single    issue 30: Qwen3-30B-A3B, single stream                       >= 300 tok/s
#   mixtral-offline issue 30: Mixtral-8x7B, offline 200 x 1000 in / 100 out      >= 16 req/s
#                   (the last two met before; with the first two, issue 30's four at one commit)
#
# Binaries: BIN_DIR, else bench_gpu_suite.sh's search (the bundle's bin/, build-gpu/). Knobs:
# DEADLINE (s from the start, default 540: a part that would start later is skipped, and
# targets.txt says so), MODELS (where the model configs go, default /tmp/bench-targets).
# BASELINE_BIN_DIR and ROUNDS pass through to bench_gpu_suite.sh (an A/B of the engine parts
# against another build's binaries, alternated). DRY_RUN=1 checks the plumbing without a GPU: the tiny presets of each family on the CPU
# executor with every count divided by 20, no kernel benchmarks (ctest bench_targets.dry_run).
# Exit status 1 when a stage failed or timed out.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: bench_targets.sh RESULTS_DIR [PART...]}
shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
all=(mixtral-single qwen3-offline dsl-offline dsl-single mla-kernel fp8-single fp8-offline fp8-attention cascade
     qwen3-single mixtral-offline)
parts=("$@")
((${#parts[@]})) || parts=("${all[@]}")
for p in "${parts[@]}"; do
  [[ " ${all[*]} " == *" $p "* ]] || { echo "bench_targets: unknown part '$p' (parts: ${all[*]})" >&2; exit 2; }
done
deadline=${DEADLINE:-540}
models=${MODELS:-/tmp/bench-targets}
dry=${DRY_RUN:-0}
suite="$here/bench_gpu_suite.sh"
targets="$out/targets.txt"
start=$(date +%s)

bin=${BIN_DIR:-}
for d in "$here/bin" "$here/../.gpu_bundle/bin" "$here/../build-gpu/bench"; do
  [[ -z "$bin" && -x "$d/bench_throughput" ]] && bin=$(cd "$d" && pwd)
done
[[ -n "$bin" ]] || { echo "bench_targets: no bench_throughput found (set BIN_DIR)" >&2; exit 1; }
for lib in "$bin/../lib" "$here/lib"; do [[ -d "$lib" ]] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"; done

# The preset a part's model takes (the family's tiny one in a dry run).
preset_of() {
  if [[ $dry == 1 ]]; then
    case $1 in mixtral-8x7b) echo tiny-mixtral ;; qwen3-30b-a3b) echo tiny-moe ;; deepseek-v2-lite) echo deepseek-tiny ;; *) echo tiny ;; esac
  else
    echo "$1"
  fi
}

# engine PART PRESET "ENGINE FLAGS" STAGES TIMEOUTS...: bench_gpu_suite.sh's STAGES on the preset's
# config-only model, the flags after --load-format dummy; TIMEOUTS are its T_* variables.
engine() {
  local part=$1 preset flags=$3 stages=$4
  preset=$(preset_of "$2")
  shift 4
  local model_flags=--config-only
  # The tiny presets hold 2,048 positions; the shared prompt needs 4,096 and more.
  [[ $dry == 1 ]] && model_flags+=" --max-position-embeddings 8192"
  local -a env=(BIN_DIR="$bin" PRESET="$preset" MODEL_DIR="$models/$preset" MODEL_FLAGS="$model_flags"
                ENGINE_FLAGS="--load-format dummy $flags" STAGES="$stages" "$@")
  [[ $dry == 1 ]] && env+=(DEVICE=cpu DIV=20)
  env "${env[@]}" bash "$suite" "$out/$part" > "$out/$part.log" 2>&1
  grep -E '^0[2-6]-' "$out/$part/bench_summary.txt" 2>/dev/null | sed "s/^/  /"
}

# kernel PART PATTERN CMD...: a kernel benchmark's output with the suite's kind of header; the
# lines matching PATTERN are the part's figures.
kernel() {
  local part=$1 pattern=$2
  shift 2
  if [[ $dry == 1 ]]; then
    echo "  (dry run: no kernel benchmark)"
    return
  fi
  mkdir -p "$out/$part"
  {
    echo "# date: $(date -u +%FT%TZ)"
    echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "# commit: $(cat "$bin/../COMMIT" 2>/dev/null || git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "# command: $*"
    timeout --signal=INT --kill-after=15 240 "$@" 2>&1
    echo "# exit status: $?"
  } > "$out/$part/$part.txt"
  grep -E "$pattern|^# exit status" "$out/$part/$part.txt" | sed "s/^/  /"
}

run_part() {
  case $1 in
    mixtral-single) engine "$1" mixtral-8x7b "" "02" T_MODEL=60 T_LATENCY=150 ;;
    qwen3-offline) engine "$1" qwen3-30b-a3b "" "04" T_MODEL=60 T_OFFLINE2=200 ;;
    dsl-offline) engine "$1" deepseek-v2-lite "--max-model-len 8192" "03" T_MODEL=60 T_OFFLINE1=120 ;;
    dsl-single) engine "$1" deepseek-v2-lite "--max-model-len 8192" "02" T_MODEL=60 T_LATENCY=120 ;;
    mla-kernel) kernel "$1" '^\| (32|64|196) \| (2048|4096) \|' "$bin/bench_cuda_mla" ;;
    fp8-single) engine "$1" llama-3-8b "--quantization fp8 --kv-cache-dtype fp8" "02" T_MODEL=60 T_LATENCY=120 ;;
    fp8-offline) engine "$1" llama-3-8b "--quantization fp8 --kv-cache-dtype fp8" "03 04" T_MODEL=60 T_OFFLINE1=120 T_OFFLINE2=160 ;;
    fp8-attention) kernel "$1" '^device: .*worst' "$bin/bench_cuda_attention" --fp8-kv ;;
    cascade) kernel "$1" '^cascade, ' "$bin/bench_cuda_attention" --cascade
      engine "$1" llama-3-8b "" "06" T_MODEL=60 T_SHARED=150 ;;
    qwen3-single) engine "$1" qwen3-30b-a3b "" "02" T_MODEL=60 T_LATENCY=120 ;;
    mixtral-offline) engine "$1" mixtral-8x7b "" "03" T_MODEL=60 T_OFFLINE1=150 ;;
  esac
}

target_of() {
  case $1 in
    mixtral-single) echo ">= 140 tok/s" ;;
    qwen3-offline) echo ">= 15,000 out tok/s" ;;
    dsl-offline) echo ">= 50 req/s" ;;
    dsl-single) echo ">= 400 tok/s" ;;
    mla-kernel) echo ">= 3.5 TB/s of latent-cache reads at batch >= 32, KV >= 2048 (the kernel table)" ;;
    fp8-single) echo ">= 430 tok/s" ;;
    fp8-offline) echo ">= 55 req/s (03), >= 30,000 out tok/s (04)" ;;
    fp8-attention) echo ">= 3,600 GB/s (the worst point)" ;;
    cascade) echo ">= 8x (kernel), >= 1.5x out tok/s (on against off)" ;;
    qwen3-single) echo ">= 300 tok/s" ;;
    mixtral-offline) echo ">= 16 req/s" ;;
  esac
}

{
  echo "bench_targets: $(date -u +%FT%TZ) on $(hostname); binaries $bin; deadline ${deadline} s$([[ $dry == 1 ]] && echo '; DRY RUN (tiny presets, CPU)')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: unavailable"
} | tee "$targets"
for p in "${parts[@]}"; do
  elapsed=$(( $(date +%s) - start ))
  if (( elapsed > deadline )); then
    echo "$p: skipped (${elapsed} s past the start, deadline ${deadline} s); target $(target_of "$p")" | tee -a "$targets"
    continue
  fi
  echo "== $p (at ${elapsed} s)"
  { echo "$p: target $(target_of "$p")"; run_part "$p"; } | tee -a "$targets"
done
echo "bench_targets: $(( $(date +%s) - start )) s; results in $out" | tee -a "$targets"
# A stage that failed or timed out fails the run (the other parts still ran).
! grep -qE ' (FAILED|TIMEOUT|PARTIAL)' "$targets"
