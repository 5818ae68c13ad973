#!/usr/bin/env bash
# Runs one benchmark command and keeps its raw output with where, when and how it ran.
#   scripts/bench_record.sh NAME -- CMD [ARGS...]
# Writes bench/results/NAME-<UTC date and time>.txt (or under $BENCH_RESULTS_DIR): a '#' header
# (name, date, host, CPU, GPU, commit, command) then the command's stdout and stderr as printed,
# then its exit status. The exit status of the script is the command's.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: $0 NAME -- CMD [ARGS...]" >&2; exit 2; }
[[ $# -ge 3 ]] || usage
name=$1; shift
[[ "$1" == "--" ]] || usage
shift
[[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "bench_record: NAME must be [A-Za-z0-9._-]+" >&2; exit 2; }
out_dir=${BENCH_RESULTS_DIR:-$root/bench/results}
mkdir -p "$out_dir"
file="$out_dir/$name-$(date -u +%Y%m%d-%H%M%S).txt"

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || cat "$root/COMMIT" 2>/dev/null || echo unknown)
if [[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then commit="$commit (+ local changes)"; fi
cpu=$(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null)
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
{
  echo "# name: $name"
  echo "# date: $(date -u +%FT%TZ)"
  echo "# host: $(hostname) ($(uname -sr))"
  echo "# cpu: ${cpu:-unknown} x $(nproc)"
  echo "# gpu: ${gpu:-none}"
  echo "# commit: $commit"
  echo "# command: $(printf '%q ' "$@")"
  echo "#"
} > "$file"
start=$(date +%s.%N)
"$@" 2>&1 | tee -a "$file"
rc=${PIPESTATUS[0]}
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "# exit status: $rc; wall time: $wall s" >> "$file"
echo "bench_record: wrote $file" >&2
exit "$rc"
