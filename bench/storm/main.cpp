// bench_storm: preemption, abort and hostile-client storms against a running `actorserve serve`
// on loopback (see docs/reliability.md and scripts/storm.sh).
//   bench_storm --mode preemption --port 8000 --requests 10000 --write-reference ref.txt
//   bench_storm --mode abort --port 8000 --server-pid PID --requests 10000
//   bench_storm --mode hostile --port 8000 --server-pid PID --idle-connections 10000
#include <fmt/format.h>
#include <sys/resource.h>

#include "bench/common/bench_cli.hpp"
#include "bench/storm/storm.hpp"

int main(int argc, char** argv) {
  using namespace actorserve;
  bench::storm::storm_options o;
  std::string mode;
  bool expect_preemptions = false;
  std::vector<bench::bench_option> own{
      {"--mode", "preemption | abort | hostile", &mode},
      {"--host", "server address", &o.host},
      {"--port", "server port", &o.port},
      {"--server-pid", "the server's process (RSS, threads, descriptors from /proc)", &o.server_pid},
      {"--model", "model name sent in requests", &o.model},
      {"--vocab-size", "prompt token ids are drawn below this", &o.vocab},
      {"--block-size", "the server's --block-size (for the KV demand figure)", &o.block_size},
      {"--requests", "requests (preemption) or streams (abort)", &o.requests},
      {"--concurrency", "requests or streams in flight at most", &o.concurrency},
      {"--seed", "seed of prompts, lengths and cut points", &o.seed},
      {"--time-limit", "seconds the mode may take; reaching it is a violation", &o.time_limit_s},
      {"--write-reference", "preemption: write the greedy token ids of every request here", &o.write_reference},
      {"--check-reference", "preemption: compare with a file written by an uncapped run", &o.check_reference},
      {"--max-pool-fraction", "preemption: the KV pool must be at most this share of the demand (0: no check)",
       &o.max_pool_fraction},
      {"--expect-preemptions", "preemption: a run without preemptions is a violation", &expect_preemptions},
      {"--ws-fraction", "abort: share of streams sent over WebSocket", &o.ws_fraction},
      {"--warmup", "abort: streams run before the RSS baseline is taken (0: max(50, requests / 10)); enough to touch "
                   "the whole KV pool once", &o.warmup},
      {"--rss-slack-mib", "abort: RSS after the storm may exceed the baseline by this much (< 0: not checked)", &o.rss_slack_mib},
      {"--idle-connections", "hostile: idle connections opened at once", &o.idle_connections},
      {"--slowloris", "hostile: connections dribbling headers or bodies byte by byte", &o.slowloris},
      {"--wellbehaved-requests", "hostile: well-behaved requests per phase (baseline, under attack)",
       &o.wellbehaved_requests},
      {"--server-deadline", "hostile: the server's header deadline in seconds, min(10, --idle-timeout)",
       &o.server_deadline_s},
      {"--latency-factor", "hostile: p50/p99 under attack <= max(factor x baseline, baseline + slack)",
       &o.latency_factor},
      {"--latency-slack-ms", "hostile: see --latency-factor", &o.latency_slack_ms},
  };
  auto cl = bench::parse_bench_command_line("Storms against a running actorserve server", own, false, argc, argv);
  if (!cl) return fmt::print(stderr, "error: {}\n", cl.err().message), 2;
  if (cl->exit_now) return fmt::print("{}", cl->output), 0;
  o.expect_preemptions = expect_preemptions;
  if (o.requests < 1 || o.concurrency < 1 || o.vocab < 3 || o.block_size < 1)
    return fmt::print(stderr, "error: --requests, --concurrency, --block-size must be positive, --vocab-size > 2\n"), 2;
  // One descriptor per connection: thousands of idle connections need the hard limit.
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  fmt::print("bench_storm: {}\n", bench::command_line_text(argc, argv));
  std::fflush(stdout);
  int rc = 2;
  if (mode == "preemption") rc = bench::storm::run_preemption(o);
  else if (mode == "abort") rc = bench::storm::run_abort(o);
  else if (mode == "hostile") rc = bench::storm::run_hostile(o);
  else return fmt::print(stderr, "error: --mode must be preemption, abort or hostile\n"), 2;
  fmt::print("bench_storm --mode {}: {}\n", mode, rc == 0 ? "PASS" : "FAIL");
  return rc;
}
