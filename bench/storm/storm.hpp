#pragma once
/// bench_storm: storms against a running `actorserve serve` on loopback. Three modes, each bounded
/// in time, each printing its figures and returning non-zero on any violation:
///   preemption  many greedy requests against a KV pool capped far below their demand
///   abort       SSE and WebSocket streams cut mid-prefill and mid-decode
///   hostile     slowloris, oversized and malformed requests, idle connections, beside
///               well-behaved clients whose latency is compared with an undisturbed baseline
/// No Beast here: the network code lives in storm_net.cpp and the mode files.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace actorserve::bench::storm {

struct storm_options {
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  int64_t server_pid = 0;                ///< RSS, threads and descriptors are read from /proc/PID
  std::string model = "llama-tiny";
  int64_t vocab = 1024;                  ///< prompt ids are drawn below this
  int64_t block_size = 16;               ///< the server's --block-size, for the KV demand figure
  int64_t requests = 1000;               ///< requests (preemption) or streams (abort)
  int64_t concurrency = 64;              ///< requests in flight at most
  int64_t seed = 1;
  double time_limit_s = 600;             ///< the whole mode; reaching it is a violation
  // preemption
  std::string write_reference;           ///< write every request's greedy token ids here
  std::string check_reference;           ///< compare with a file written by an uncapped run
  double max_pool_fraction = 0.05;       ///< violation if kv_blocks_total > this x demand (0: no check)
  bool expect_preemptions = false;       ///< violation if the run preempted nothing
  // abort
  double ws_fraction = 0.4;              ///< share of streams sent over WebSocket
  double rss_slack_mib = 16;             ///< RSS after may exceed the baseline by this much
  int64_t warmup = 0;                    ///< streams before the baseline is taken (0: max(50, requests / 10))
  // hostile
  int64_t idle_connections = 10000;
  int64_t slowloris = 64;
  int64_t wellbehaved_requests = 400;    ///< per phase (baseline, under attack)
  double server_deadline_s = 10;         ///< the server's header deadline (min(10 s, --idle-timeout))
  double latency_factor = 4;             ///< p50/p99 under attack <= max(factor x base, base + slack)
  double latency_slack_ms = 100;
};

/// The server's /metrics gauges that the storms check.
struct server_metrics {
  bool ok = false;
  std::map<std::string, double> values;  ///< name without "actorserve:" -> value
  double get(const std::string& name) const;
};

/// A process's /proc figures (KiB, counts); zeros when unreadable.
struct process_figures {
  int64_t rss_kib = 0, threads = 0, fds = 0;
};
process_figures read_process(int64_t pid);

/// Violations found so far; a mode returns 1 when there is any.
class verdict {
 public:
  /// Records `what` as a violation unless `ok`; prints "ok"/"VIOLATION" with it either way.
  void check(bool ok, const std::string& what);
  int exit_code() const { return violations_ == 0 ? 0 : 1; }
  int64_t violations() const { return violations_; }

 private:
  int64_t violations_ = 0;
};

/// Percentiles of latencies in milliseconds.
struct latency_figures {
  double p50 = 0, p99 = 0, max = 0;
  int64_t count = 0;
};
latency_figures latencies(const std::vector<double>& ms);

int run_preemption(const storm_options& o);
int run_abort(const storm_options& o);
int run_hostile(const storm_options& o);

}  // namespace actorserve::bench::storm
