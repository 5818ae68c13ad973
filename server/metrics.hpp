#pragma once
/// Server metrics in Prometheus text format: engine gauges/counters read from engine_stats, and
/// latency histograms observed by the connections (lock-free, any thread).
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"

namespace actorserve::server {

/// A cumulative histogram with fixed bucket bounds (seconds, or a count of tokens).
class histogram {
 public:
  explicit histogram(std::vector<double> bounds);
  void observe(double seconds);
  /// Appends `# HELP`, `# TYPE` and the bucket/sum/count series.
  void render(std::string& out, std::string_view name, std::string_view help) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> buckets_;  ///< per bucket (not cumulative); last is +Inf
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};             ///< sum in microseconds
};

class metrics {
 public:
  metrics();
  /// Bucket bounds for token counts (1, 2, 5, 10, ... 5,000,000).
  static std::vector<double> token_buckets();
  histogram time_to_first_token;
  histogram inter_token_latency;
  histogram e2e_request_latency;
  histogram request_decode_time;        ///< first token to last, per engine request (seconds)
  histogram request_prompt_tokens;      ///< per engine request (a count, not seconds)
  histogram request_generation_tokens;  ///< per engine request, over its n choices (a count)
  std::atomic<int64_t> http_requests{0};
  std::atomic<int64_t> http_errors{0};          ///< 4xx/5xx answers
  std::atomic<int64_t> streams_cut{0};          ///< slow clients whose stream was cut
  std::atomic<int64_t> open_connections{0};
  std::atomic<int64_t> connections_refused{0};  ///< closed at accept: --max-connections or no descriptors
  std::atomic<int64_t> connections_timed_out{0};///< closed by a header, body or idle deadline
  std::atomic<int64_t> engine_requests_submitted{0};  ///< engine requests admitted by submit()
  std::atomic<int64_t> finished_stop{0}, finished_length{0}, finished_abort{0}, finished_error{0};

  /// The whole /metrics page; `active_jobs`: API requests between submit and last byte;
  /// `vllm_names` (--metrics-compat vllm): series with a vLLM counterpart take its `vllm:` name;
  /// `engines`: a front end's engine processes, one `engine="HOST:PORT"` series set each.
  std::string render(const actors::engine_stats& s, std::string_view model, int64_t active_jobs,
                     bool vllm_names = false, const std::vector<actors::engine_node>& engines = {}) const;
};

}  // namespace actorserve::server
