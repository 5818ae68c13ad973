#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang + ASan/UBSan and runs each one for SECONDS
# (default 60) on a temporary copy of its seed corpus, FUZZ_PARALLEL targets at a time. Fails on
# any crash, sanitizer report, leak, timeout or out-of-memory, printing the report, the stack and
# the reproducer (base64); exits 2 for an unknown target or one not built under FUZZ_NO_BUILD=1.
# Usage: scripts/fuzz_smoke.sh [SECONDS] [TARGET...]
# Environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (2, build jobs), FUZZ_PARALLEL (1),
#   FUZZ_SEED (1; a fixed seed: the same commit mutates the same way), FUZZ_MAX_RUNS (no limit),
#   FUZZ_UNIT_TIMEOUT (10 s per input), FUZZ_RSS_MB (2048), FUZZ_STRICT=1 (ignore
#   fuzz/known_issues.txt), FUZZ_KEEP=DIR (keep the grown corpora, logs and artifacts there),
#   FUZZ_NO_BUILD=1.
set -euo pipefail

seconds=${1:-60}
shift || true
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
parallel=${FUZZ_PARALLEL:-1}
all_targets=(fuzz_chat_template fuzz_tokenizer_codec fuzz_tokenizer_load fuzz_openai_request
             fuzz_websocket_message fuzz_safetensors_header fuzz_model_config fuzz_chat_output fuzz_grammar)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz_smoke: unknown target '$t' (targets: ${all_targets[*]})" >&2; exit 2; }
done

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  cmake_args=(-S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DACTORSERVE_ENABLE_CUDA=OFF
              -DACTORSERVE_FUZZ=ON -DACTORSERVE_SANITIZE=address)
  # Older build-fuzz trees cached a project-include hook; the root CMakeLists.txt adds fuzz/ now.
  cmake_args+=(-UCMAKE_PROJECT_INCLUDE)
  cmake "${cmake_args[@]}" >/dev/null
  ninja -C "$build" -j"${FUZZ_JOBS:-2}" "${targets[@]}"
fi

for t in "${targets[@]}"; do
  [ -x "$build/fuzz/$t" ] || { echo "fuzz_smoke: $build/fuzz/$t is not built (run without FUZZ_NO_BUILD=1, or ninja -C $build $t)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/actorserve_fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Runs target $1 in $work/$1 and writes its verdict lines to $work/$1/report; exit 0 when clean.
run_target() {
  local t=$1 dir="$work/$1" flags=() known="" who what _
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp "$root/fuzz/corpus/$t/"* "$dir/corpus/"
  : >"$dir/ubsan.supp"
  : >"$dir/lsan.supp"
  if [ "${FUZZ_STRICT:-0}" != 1 ]; then
    while read -r who what _; do
      case "$who" in ''|'#'*) continue ;; esac
      [ "$who" = '*' ] || [ "$who" = "$t" ] || continue
      case "$what" in
        ubsan:*) echo "${what#ubsan:}" >>"$dir/ubsan.supp" ;;
        lsan:*) echo "${what#lsan:}" >>"$dir/lsan.supp" ;;
        flag:*) flags+=("${what#flag:}") ;;
        check:*) known="${known:+$known,}${what#check:}" ;;
      esac
    done <"$root/fuzz/known_issues.txt"
  fi
  [ -f "$root/fuzz/dict/$t.dict" ] && flags+=(-dict="$root/fuzz/dict/$t.dict")
  [ -n "${FUZZ_MAX_RUNS:-}" ] && flags+=(-runs="$FUZZ_MAX_RUNS")
  local rc=0
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$dir/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
  LSAN_OPTIONS="suppressions=$dir/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" ACTORSERVE_FUZZ_KNOWN="$known" \
    nice -n 19 "$build/fuzz/$t" -max_total_time="$seconds" -seed="${FUZZ_SEED:-1}" \
      -timeout="${FUZZ_UNIT_TIMEOUT:-10}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "${flags[@]}" "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  local execs speed cov
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" || true)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" || true)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$dir/log" | tail -1 || true)
  {
    echo "== $t: ${seconds}s, seed ${FUZZ_SEED:-1}${known:+ (known: $known)}"
    if [ $rc -ne 0 ] || [ -n "$(ls -A "$dir/artifacts")" ]; then
      echo "FAIL $t (exit $rc, artifacts: $(ls "$dir/artifacts" | tr '\n' ' '))"
      grep -A1 -E 'ERROR|SUMMARY|FUZZ_CHECK|runtime error' "$dir/log" | head -20 || true
      grep -E '#[0-9]+ 0x' "$dir/log" | grep -v -E 'libFuzzer|fuzzer::|libc|_start|sanitizer_print' | head -12 || true
      for a in "$dir/artifacts/"*; do
        [ -f "$a" ] || continue
        echo "reproducer $(basename "$a") ($(stat -c %s "$a") bytes, base64; decode into fuzz/crashes/$t/):"
        head -c 8192 "$a" | base64 -w 100
      done
    else
      echo "ok   $t: ${execs:-?} executions, ${speed:-?} exec/s, ${cov:-?}"
    fi
  } >"$dir/report"
  if [ -n "${FUZZ_KEEP:-}" ]; then
    mkdir -p "$FUZZ_KEEP/$t"
    cp -r "$dir/." "$FUZZ_KEEP/$t/"
  fi
  [ $rc -eq 0 ] && [ -z "$(ls -A "$dir/artifacts")" ]
}

# FUZZ_PARALLEL targets at a time; each report is printed when its target ends.
declare -A pid_of=()
failed=()
finish_one() {
  local done_pid=$1 rc=$2 t
  for t in "${!pid_of[@]}"; do
    [ "${pid_of[$t]}" = "$done_pid" ] || continue
    cat "$work/$t/report"
    [ "$rc" -eq 0 ] || failed+=("$t")
    unset 'pid_of[$t]'
  done
}
for t in "${targets[@]}"; do
  while [ ${#pid_of[@]} -ge "$parallel" ]; do
    rc=0; wait -n -p done_pid "${pid_of[@]}" || rc=$?
    finish_one "$done_pid" "$rc"
  done
  run_target "$t" &
  pid_of[$t]=$!
done
while [ ${#pid_of[@]} -gt 0 ]; do
  rc=0; wait -n -p done_pid "${pid_of[@]}" || rc=$?
  finish_one "$done_pid" "$rc"
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz_smoke: $(( ${#targets[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed (${failed[*]})"
  exit 1
fi
echo "fuzz_smoke: ${#targets[@]} passed, 0 failed"
