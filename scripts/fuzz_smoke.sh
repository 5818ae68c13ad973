#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) in build-fuzz with clang + ASan/UBSan and runs each one for
# SECONDS (default 60) on a temporary copy of its seed corpus. Fails on any crash, leak, timeout or
# out-of-memory. Usage: scripts/fuzz_smoke.sh [SECONDS] [TARGET...]
# Environment: FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (2), FUZZ_MAX_RUNS (no limit),
#   FUZZ_UNIT_TIMEOUT (10 s per input), FUZZ_STRICT=1 (ignore fuzz/known_issues.txt),
#   FUZZ_KEEP=DIR (keep the grown corpora, logs and artifacts there), FUZZ_NO_BUILD=1.
set -euo pipefail

seconds=${1:-60}
shift || true
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
all_targets=(fuzz_openai_request fuzz_websocket_message fuzz_tokenizer_codec fuzz_tokenizer_load
             fuzz_chat_template fuzz_safetensors_header fuzz_model_config)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  cmake_args=(-S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DACTORSERVE_ENABLE_CUDA=OFF
              -DACTORSERVE_FUZZ=ON -DACTORSERVE_SANITIZE=address)
  # Older build-fuzz trees cached a project-include hook; the root CMakeLists.txt adds fuzz/ now.
  cmake_args+=(-UCMAKE_PROJECT_INCLUDE)
  cmake "${cmake_args[@]}" >/dev/null
  ninja -C "$build" -j"${FUZZ_JOBS:-2}" "${targets[@]}"
fi

work=$(mktemp -d /tmp/actorserve_fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  dir="$work/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  cp "$root/fuzz/corpus/$t/"* "$dir/corpus/"
  : >"$dir/ubsan.supp"
  : >"$dir/lsan.supp"
  flags=()
  known=""
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
  echo "== $t: ${seconds}s ${flags[*]}${known:+ (known: $known)}"
  set +e
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$dir/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
  LSAN_OPTIONS="suppressions=$dir/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" ACTORSERVE_FUZZ_KNOWN="$known" \
    nice -n 19 "$build/fuzz/$t" -max_total_time="$seconds" -timeout="${FUZZ_UNIT_TIMEOUT:-10}" -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "${flags[@]}" "$dir/corpus" >"$dir/log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" || true)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log")
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$dir/log" | tail -1 || true)
  if [ $rc -ne 0 ] || [ -n "$(ls -A "$dir/artifacts")" ]; then
    echo "FAIL $t (exit $rc, artifacts: $(ls "$dir/artifacts" | tr '\n' ' '))"
    grep -A1 -E 'ERROR|SUMMARY|FUZZ_CHECK|runtime error' "$dir/log" | head -20
    grep -E '#[0-9]+ 0x' "$dir/log" | grep -v -E 'libFuzzer|fuzzer::|libc|_start|sanitizer_print' | head -12
    failed+=("$t")
  else
    echo "ok   $t: ${execs:-?} executions, ${speed:-?} exec/s, ${cov:-?}"
  fi
  if [ -n "${FUZZ_KEEP:-}" ]; then
    mkdir -p "$FUZZ_KEEP/$t"
    cp -r "$dir/." "$FUZZ_KEEP/$t/"
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz_smoke: $(( ${#targets[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed (${failed[*]})"
  exit 1
fi
echo "fuzz_smoke: ${#targets[@]} passed, 0 failed"
