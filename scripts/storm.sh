#!/usr/bin/env bash
# Storms against the real server on loopback (docs/reliability.md): starts `actorserve serve`
# (CPU executor, tests/data/models/llama-tiny) for each run, drives it with bench_storm, and stops
# it with SIGTERM (a clean exit is part of the check).
#   scripts/storm.sh [--quick] [--build-dir DIR] [--modes "preemption abort hostile"] [--seed N]
# Full size: 10,000 requests (preemption: an uncapped reference run, then a run with the KV pool
# capped), 10,000 streams (abort), 10,000 idle connections (hostile). --quick is the scaled-down
# storm that ctest runs (storm.quick). Exit status: 0 when every run passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
quick=0
modes="preemption abort hostile"
seed=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --build-dir) build=$2; shift ;;
    --modes) modes=$2; shift ;;
    --seed) seed=$2; shift ;;
    *) echo "storm.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
server_bin=$build/server/actorserve
storm_bin=$build/bench/bench_storm
# 77: ctest reports the test as skipped (a build of the test targets only, e.g. scripts/sanitize.sh).
for b in "$server_bin" "$storm_bin"; do
  [[ -x $b ]] || { echo "storm.sh: $b not built (ninja -C $build actorserve bench_storm): skipped" >&2; exit 77; }
done

if [[ $quick == 1 ]]; then
  requests=600; streams=600; concurrency=32; capped_blocks=24; idle=500; slowloris=16; wellbehaved=100
  idle_timeout=3; limit=120; abort_blocks=2048; warmup=300
else
  requests=10000; streams=10000; concurrency=64; capped_blocks=48; idle=10000; slowloris=64; wellbehaved=400
  idle_timeout=10; limit=900; abort_blocks=4096; warmup=1000
fi
# Under sanitizers (a build with ACTORSERVE_SANITIZE, as scripts/sanitize.sh runs ctest) the server
# is several times slower and ASan's quarantine holds freed memory: looser time and latency bounds,
# and no RSS check.
latency_slack=100; rss_slack=16
[[ $quick == 1 ]] && latency_slack=250  # ctest shares its cores with the build
sanitize=$(sed -n 's/^ACTORSERVE_SANITIZE:STRING=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [[ -n $sanitize && $sanitize != none ]]; then
  latency_slack=2000; rss_slack=-1; limit=$((limit * 4))
  echo "storm.sh: $sanitize sanitizer build: latency slack ${latency_slack} ms, RSS not checked"
fi
# 10k idle connections need 10k descriptors on each side, plus the storms' own.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [[ $(ulimit -n) != unlimited && $(ulimit -n) -lt $((idle + 1024)) ]]; then
  echo "storm.sh: ulimit -n is $(ulimit -n); the hostile storm needs $((idle + 1024))" >&2
  exit 2
fi

work=$(mktemp -d /tmp/storm.XXXXXX)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# start_server NAME ARGS...: starts the server on a free port; sets server_pid and port.
start_server() {
  local name=$1; shift
  local log=$work/$name.log
  "$server_bin" serve --model "$root/tests/data/models/llama-tiny" --served-model-name llama-tiny \
    --device cpu --cpu-threads 1 --port 0 --log-level info "$@" >"$log" 2>&1 &
  server_pid=$!
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [[ -n $port ]] && break
    kill -0 "$server_pid" 2>/dev/null || { echo "storm.sh: the server exited:"; cat "$log"; exit 1; }
    sleep 0.1
  done
  [[ -n $port ]] || { echo "storm.sh: the server did not start:"; cat "$log"; exit 1; }
  echo "== $name: actorserve serve $* (pid $server_pid, port $port)"
}

# stop_server: SIGTERM, and the server must exit 0 within its drain timeout.
stop_server() {
  kill -TERM "$server_pid"
  local rc=0
  wait "$server_pid" || rc=$?
  server_pid=""
  if [[ $rc != 0 ]]; then echo "storm.sh: the server exited with $rc after SIGTERM"; failed=1; fi
}

failed=0
run_storm() {
  local rc=0
  "$storm_bin" --port "$port" --server-pid "$server_pid" --seed "$seed" --time-limit "$limit" "$@" || rc=$?
  [[ $rc == 0 ]] || failed=1
}

for mode in $modes; do
  case "$mode" in
    preemption)
      # --max-model-len 128: the longest request (48 + 32 tokens) fits, and so must the pool.
      start_server preemption-uncapped --max-model-len 128
      run_storm --mode preemption --requests "$requests" --concurrency "$concurrency" \
        --write-reference "$work/reference.txt" --max-pool-fraction 0
      stop_server
      start_server preemption-capped --max-model-len 128 --num-gpu-blocks-override "$capped_blocks"
      run_storm --mode preemption --requests "$requests" --concurrency "$concurrency" \
        --check-reference "$work/reference.txt" --max-pool-fraction 0.05 --expect-preemptions
      stop_server
      ;;
    abort)
      # A pool the warm-up touches whole, so that first-touch pages are in the RSS baseline.
      start_server abort --num-gpu-blocks-override "$abort_blocks"
      run_storm --mode abort --requests "$streams" --concurrency "$concurrency" --warmup "$warmup" \
        --rss-slack-mib "$rss_slack"
      stop_server
      ;;
    hostile)
      start_server hostile --idle-timeout "$idle_timeout"
      run_storm --mode hostile --idle-connections "$idle" --slowloris "$slowloris" \
        --wellbehaved-requests "$wellbehaved" --server-deadline "$idle_timeout" --latency-slack-ms "$latency_slack"
      stop_server
      ;;
    *) echo "storm.sh: unknown mode $mode" >&2; exit 2 ;;
  esac
done
if [[ $failed == 0 ]]; then echo "storm.sh: PASS"; else echo "storm.sh: FAIL"; fi
exit "$failed"
