#!/usr/bin/env bash
# Charts throughput and per-token latency across recorded benchmark runs (PNG, gnuplot).
#   scripts/bench_chart.sh [-o OUT.png] [RESULT_FILES_OR_DIRS...]
# Default: every bench/results/*.txt (files written by bench_record.sh or bench_gpu_suite.sh),
# chart at bench/results/chart.png. Per run it takes:
#   throughput: bench_throughput "Throughput: ... Z output tokens/s", bench_serving "Output token
#               throughput (tok/s)", bench_latency "Decode tokens/s"
#   latency:    bench_latency "Per-token latency (ms): p50", bench_serving "Median TPOT (ms)" and
#               "Median TTFT (ms)"
# Needs gnuplot (apt-get install gnuplot-nox); also writes the table it plotted next to the PNG.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/bench/results/chart.png
if [[ "${1:-}" == "-o" ]]; then out=$2; shift 2; fi
inputs=("$@")
[[ ${#inputs[@]} -gt 0 ]] || inputs=("$root/bench/results")
files=()
for p in "${inputs[@]}"; do
  if [[ -d "$p" ]]; then
    while IFS= read -r f; do files+=("$f"); done < <(find "$p" -maxdepth 1 -name '*.txt' ! -name 'summary*' | sort)
  else
    files+=("$p")
  fi
done
[[ ${#files[@]} -gt 0 ]] || { echo "bench_chart: no result files" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "bench_chart: gnuplot missing (apt-get install gnuplot-nox)" >&2; exit 1; }

table=${out%.png}.tsv
printf 'run\toutput_tok_s\tper_token_ms\tttft_ms\n' > "$table"
for f in "${files[@]}"; do
  label=$(basename "$f" .txt | sed -E 's/-[0-9]{8}-[0-9]{6}$//')
  awk -v run="$label" '
    /^Throughput: .* output tokens\/s/ && tput == "" { for (i = 1; i <= NF; ++i) if ($(i+1) == "output") tput = $i }
    /^Output token throughput \(tok\/s\):/ && tput == "" { tput = $NF }
    /^Decode tokens\/s:/ && tput == "" { tput = $3 }
    /^Per-token latency \(ms\):/ && lat == "" { v = $5; sub(",", "", v); lat = v }
    /^Median TPOT \(ms\):/ && lat == "" { lat = $NF }
    /^Median TTFT \(ms\):/ && ttft == "" { ttft = $NF }
    /^Time to first token:/ && ttft == "" { ttft = $9 }
    END {
      if (tput == "" && lat == "") exit
      printf "%s\t%s\t%s\t%s\n", run, (tput == "" ? "?" : tput), (lat == "" ? "?" : lat), (ttft == "" ? "?" : ttft)
    }' "$f" >> "$table"
done
rows=$(($(wc -l < "$table") - 1))
[[ $rows -gt 0 ]] || { echo "bench_chart: no benchmark figures found in ${files[*]}" >&2; exit 1; }
width=$((800 + rows * 70))
gnuplot <<GP
set terminal pngcairo size ${width},900 noenhanced font ",10"
set output "$out"
set datafile separator "\t"
set datafile missing "?"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set grid ytics
set xtics rotate by -30 left
set key top left
set bmargin 10
set rmargin 22
set multiplot layout 2,1 title "actorserve benchmarks (${rows} runs)"
set title "Throughput"
set ylabel "output tokens/s"
set xrange [-0.6:${rows}-0.4]
plot "$table" skip 1 using 2:xtic(1) title "output tokens/s" lc rgb "#4477aa"
set title "Latency"
set ylabel "ms"
set logscale y
plot "$table" skip 1 using 3:xtic(1) title "per-token (p50 / median TPOT)" lc rgb "#ee6677", \
     "" skip 1 using 4 title "TTFT (median)" lc rgb "#228833"
unset multiplot
GP
echo "bench_chart: wrote $out ($rows runs; table $table)"
