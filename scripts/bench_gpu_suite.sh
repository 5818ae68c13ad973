#!/usr/bin/env bash
# The end-to-end performance suite on one GPU (H200), in about 9 minutes:
#   1. a random-weight llama-3-8b (bf16, 16 GB) written to $MODEL_DIR (default /tmp/llama3-8b)
#   2. single stream: 128 in / 256 out                        (bench_latency)
#   3. offline: 200 prompts x 1000 in / 100 out               (bench_throughput)
#   4. offline: 1000 prompts x 128 in / 1024 out              (bench_throughput)
#      (3 and 4 at bench_throughput's offline limits: --max-num-seqs 512 --max-num-batched-tokens 65536)
#   5. online: 1000 ShareGPT-like requests at 16 req/s against `actorserve serve --device cuda`
#      started in the background                              (bench_serving)
#   6. (only when STAGES names it) 256 streams behind one 4096-token system prompt, cascade
#      attention on, then --disable-cascade-attn              (bench_throughput --preset shared-system-prompt)
# then prints a summary table. Every stage has a timeout and its own log under RESULTS_DIR.
#
#   bench_gpu_suite.sh RESULTS_DIR
# Binaries: $BIN_DIR, else bin/ beside this script (inside a GPU bundle), else the bundle or
# build-gpu/ of the source tree. Tokenizer: $TOKENIZER, else data/models/llama-tiny/tokenizer.json
# of the bundle or of $ACTORSERVE_TEST_DATA or of tests/, else a synthetic one.
# Knobs: MODEL_DIR, PRESET (llama-3-8b), MODEL_FLAGS (extra writer flags), DEVICE (cuda), PORT
# (8011), ENGINE_FLAGS (extra engine flags for every stage), STAGES (the stages after the model to
# run, "02 03 04 05" by default; e.g. "02" for the single stream only, "06" for the shared prompt),
# DIV (divides every prompt/request count: DIV=20 DEVICE=cpu PRESET=tiny is a CPU dry run),
# T_MODEL T_LATENCY T_OFFLINE1 T_OFFLINE2 T_SERVING T_SHARED (stage timeouts, s).
# A/B: BASELINE_BIN_DIR names a second build's binaries (a bundle's bin/ or a build tree); the
# in-process stages (02, 03, 04, 06) then run ROUNDS times (2 unless set), this build's run
# followed by the baseline's (NAME-rN, NAME-base-rN), so that drift over the run (clocks, other
# tenants of the host) falls on both. Stage 05 runs once, on this build. ROUNDS alone repeats
# this build's stages.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: bench_gpu_suite.sh RESULTS_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

find_bin_dir() {
  local d
  for d in "${BIN_DIR:-}" "$here/bin" "$here/../.gpu_bundle/bin" "$here/../build-gpu"; do
    [[ -n "$d" && -x "$d/bench_throughput" ]] && { echo "$d"; return; }
    [[ -n "$d" && -x "$d/bench/bench_throughput" ]] && { echo "$d/bench"; return; }
  done
}
bin=$(find_bin_dir)
[[ -n "$bin" ]] || { echo "bench_gpu_suite: no bench_throughput found (set BIN_DIR)" >&2; exit 1; }
baseline=
if [[ -n "${BASELINE_BIN_DIR:-}" ]]; then
  for d in "$BASELINE_BIN_DIR" "$BASELINE_BIN_DIR/bench"; do [[ -x "$d/bench_throughput" ]] && { baseline=$(cd "$d" && pwd); break; }; done
  [[ -n "$baseline" ]] || { echo "bench_gpu_suite: no bench_throughput in BASELINE_BIN_DIR=$BASELINE_BIN_DIR" >&2; exit 1; }
  [[ -d "$baseline/../lib" ]] && export LD_LIBRARY_PATH="$baseline/../lib:${LD_LIBRARY_PATH:-}"
fi
rounds=${ROUNDS:-$([[ -n "$baseline" ]] && echo 2 || echo 1)}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_gpu_suite: ROUNDS=$rounds is not a positive count" >&2; exit 1; }
server_bin="$bin/actorserve"
[[ -x "$server_bin" ]] || server_bin="$bin/../server/actorserve"
for lib in "$bin/../lib" "$here/lib"; do [[ -d "$lib" ]] && export LD_LIBRARY_PATH="$lib:${LD_LIBRARY_PATH:-}"; done
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"

tokenizer=${TOKENIZER:-}
for t in "$here/data" "${ACTORSERVE_TEST_DATA:-}" "$here/../tests/data"; do
  [[ -z "$tokenizer" && -n "$t" && -f "$t/models/llama-tiny/tokenizer.json" ]] && tokenizer="$t/models/llama-tiny/tokenizer.json"
done
model=${MODEL_DIR:-/tmp/llama3-8b}
preset=${PRESET:-llama-3-8b}
device=${DEVICE:-cuda}
port=${PORT:-8011}
div=${DIV:-1}
read -r -a extra <<< "${ENGINE_FLAGS:-}"
read -r -a model_flags <<< "${MODEL_FLAGS:-}"
engine=(--model "$model" --device "$device" --log-level warn "${extra[@]}")
summary="$out/bench_summary.txt"
suite_start=$(date +%s)
stages=" ${STAGES:-02 03 04 05} "
want() { [[ "$stages" == *" $1 "* ]]; }  # want NN: STAGES names stage NN

commit_of() {  # commit_of BIN_DIR: a bundle's COMMIT beside bin/, the build tree's checkout, else this script's
  local dir=$1
  cat "$dir/../COMMIT" 2>/dev/null || git -C "$dir" rev-parse --short HEAD 2>/dev/null ||
    cat "$here/COMMIT" 2>/dev/null || git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown
}

header() {  # header NAME CMD... -> the result file's '#' header
  echo "# name: $1"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# host: $(hostname) ($(uname -sr))"
  echo "# cpu: $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo) x $(nproc)"
  echo "# gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "# commit: $(commit_of "$(dirname "$2")")"
  shift
  echo "# command: $(printf '%q ' "$@")"
  echo "#"
}

declare -a names statuses figures
stage() {  # stage NAME TIMEOUT CMD... -> runs with a timeout, logs to $out/NAME.txt
  local name=$1 limit=$2; shift 2
  local file="$out/$name.txt" t0 rc
  header "$name" "$@" > "$file"
  echo "== $name (timeout ${limit}s)"
  t0=$(date +%s)
  timeout --signal=INT --kill-after=15 "$limit" "$@" >> "$file" 2>&1
  rc=$?
  echo "# exit status: $rc; wall time: $(( $(date +%s) - t0 )) s" >> "$file"
  grep -vE '^#' "$file" | tail -25
  names+=("$name")
  case $rc in
    0) statuses+=("ok") ;;
    124|137) statuses+=("TIMEOUT") ;;
    *) if grep -qE '^(TIMED OUT|DURATION LIMIT)' "$file"; then statuses+=("PARTIAL"); else statuses+=("FAILED($rc)"); fi ;;
  esac
  figures+=("$(figure "$file")")
  return $rc
}

engine_stage() {  # engine_stage NAME TIMEOUT BENCH ARGS...: $bin/BENCH, by rounds and against the baseline
  local name=$1 limit=$2 bench=$3 r
  shift 3
  if [[ -z "$baseline" && "$rounds" == 1 ]]; then
    stage "$name" "$limit" "$bin/$bench" "$@"
    return
  fi
  for r in $(seq 1 "$rounds"); do
    stage "$name-r$r" "$limit" "$bin/$bench" "$@"
    [[ -n "$baseline" ]] && stage "$name-base-r$r" "$limit" "$baseline/$bench" "$@"
  done
  return 0
}

figure() {  # the headline numbers of one result file (or its first error)
  awk '
    function add(text) { out = out text }
    /^wrote .* GB in/ { add(sprintf("%s GB in %s s, %s GB/s", $2, $8, substr($10, 2))) }
    /^Throughput:/ && !t { t = 1; add(sprintf("%s req/s, %s total tok/s, %s out tok/s; ", $2, $4, $7)) }
    /^Preemptions:/ { add(sprintf("preemptions %s", $2)) }
    /^Cascade attention:/ { n = $0; sub(/.*\(/, "", n); sub(/ sequence-steps.*/, "", n); add(sprintf("; cascade %s seq-steps", n)) }
    /^GPU idle between steps:/ && !g { g = 1; add(sprintf("; GPU idle %s %%", $5)) }
    /^Decode-only steps:/ && !d { d = 1; add(sprintf("; decode-only %s x %s ms (batch %s)", $3, $5, $10)) }
    /^Prefill-carrying steps:/ && !p { p = 1; add(sprintf("; prefill-carrying %s x %s ms (%s tok)", $3, $5, $8)) }
    /^Avg latency:/ { add(sprintf("avg %s s; ", $3)) }
    /^Decode tokens\/s:/ { add(sprintf("decode %s tok/s; ", $3)) }
    /^Per-token latency/ { a = $5; b = $9; sub(",", "", a); sub(",", "", b); add(sprintf("per-token p50 %s p99 %s ms", a, b)) }
    /^Successful requests:/ { add(sprintf("%s ok; ", $3)) }
    /^Output token throughput/ { add(sprintf("%s out tok/s; ", $NF)) }
    /^Median TTFT/ { add(sprintf("TTFT p50 %s ms; ", $NF)) }
    /^Median TPOT/ { add(sprintf("TPOT p50 %s ms; ", $NF)) }
    /^P99 ITL/ { add(sprintf("ITL p99 %s ms", $NF)) }
    /(^error: |error: )/ && err == "" { err = substr($0, 1, 110) }
    END { print (out != "" ? out : err) }
  ' "$1" | sed 's/[;, ]*$//'
}

{
  echo "bench_gpu_suite: $(date -u +%FT%TZ) on $(hostname); binaries $bin"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader 2>/dev/null || echo "nvidia-smi: unavailable"
  [[ -n "$baseline" ]] && echo "baseline binaries $baseline; $rounds rounds, alternated"
} | tee "$out/bench_environment.txt"

# 1. The model (kept across runs: a marker names the preset once the write completed).
marker="$model/.bench-complete-$preset${MODEL_FLAGS:+-custom}"
if [[ -f "$marker" ]]; then
  echo "== 01-model: reusing $model"
  names+=("01-model"); statuses+=("reused"); figures+=("$model")
else
  tok_flag=(--synthetic-tokenizer)
  [[ -n "$tokenizer" ]] && tok_flag=(--tokenizer "$tokenizer")
  rm -f "$model"/.bench-complete-*
  stage 01-model "${T_MODEL:-75}" "$bin/bench_make_random_model" --preset "$preset" --output "$model" "${tok_flag[@]}" \
    "${model_flags[@]}" \
    && touch "$marker"
fi

# 2-4. Engine benchmarks in-process.
want 02 && engine_stage 02-latency-128in-256out "${T_LATENCY:-70}" bench_latency "${engine[@]}" \
  --input-len 128 --output-len 256 --num-iters 5 --num-iters-warmup 2
want 03 && engine_stage 03-offline-200x1000in-100out "${T_OFFLINE1:-75}" bench_throughput "${engine[@]}" \
  --num-prompts $((200 / div)) --input-len 1000 --output-len 100 --timeout 50
want 04 && engine_stage 04-offline-1000x128in-1024out "${T_OFFLINE2:-160}" bench_throughput "${engine[@]}" \
  --num-prompts $((1000 / div)) --input-len 128 --output-len 1024 --timeout 120

# 5. Online: the server in the background, the client against it.
if want 05; then
  server_log="$out/05-server.log"
  "$server_bin" serve "${engine[@]}" --host 127.0.0.1 --port "$port" --drain-timeout 5 > "$server_log" 2>&1 &
  server_pid=$!
  stage 05-serving-sharegpt-1000req-16rps "${T_SERVING:-150}" "$bin/bench_serving" --host 127.0.0.1 --port "$port" \
    --model-dir "$model" --num-prompts $((1000 / div)) --request-rate 16 --length-distribution sharegpt --wait-for-server 50 --server-pid "$server_pid" \
    --duration-limit 85 --timeout 60
  if kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    for _ in $(seq 1 20); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid"
  fi
  wait "$server_pid" 2>/dev/null
  echo "server exit status: $?" >> "$server_log"
fi

# 6. The shared system prompt (issue 37's workload), cascade attention on and off.
if want 06; then
  for cascade in on off; do
    flags=()
    [[ $cascade == off ]] && flags=(--disable-cascade-attn)
    engine_stage "06-shared-prompt-cascade-$cascade" "${T_SHARED:-120}" bench_throughput \
      "${engine[@]}" "${flags[@]}" --preset shared-system-prompt --num-prompts $((256 / div)) --temperature 0 \
      --timeout 100
  done
fi

{
  echo
  echo "============================== bench summary =============================="
  echo "total wall time: $(( $(date +%s) - suite_start )) s; results in $out"
  printf '%-44s %-10s %s\n' "stage" "status" "figures"
  for i in "${!names[@]}"; do printf '%-44s %-10s %s\n' "${names[$i]}" "${statuses[$i]}" "${figures[$i]}"; done
} | tee "$summary"
for s in "${statuses[@]}"; do [[ "$s" == ok || "$s" == reused ]] || exit 1; done
exit 0
