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

/// Appends a histogram in Prometheus text format from its bucket counts (`per_bucket`: one per
/// bound plus +Inf, not cumulative).
void render_histogram(std::string& out, std::string_view name, std::string_view help, const std::vector<double>& bounds,
                      const std::vector<int64_t>& per_bucket, double sum, int64_t count);

class metrics {
 public:
  /// `max_model_len` bounds the token-count buckets, as vLLM bounds them (0: up to a million).
  explicit metrics(int64_t max_model_len = 0);
  /// vLLM's 1-2-5 bucket bounds for token counts: 1, 2, 5, 10, ... up to `max_value`.
  static std::vector<double> token_buckets(int64_t max_value = 0);
  /// vLLM's bounds of its per-request latency histograms (0.3 s to 7680 s).
  static std::vector<double> request_latency_buckets();
  histogram time_to_first_token;
  histogram inter_token_latency;
  histogram e2e_request_latency;
  /// Per engine request, from the scheduler's clock (actors::request_times), seconds.
  histogram request_queue_time;         ///< queued to first scheduled
  histogram request_prefill_time;       ///< first scheduled to first token
  histogram request_decode_time;        ///< first token to last
  histogram request_inference_time;     ///< first scheduled to last token
  histogram request_prompt_tokens;      ///< per engine request (a count, not seconds)
  histogram request_generation_tokens;  ///< per engine request, over its n choices (a count)
  histogram request_params_n;           ///< per engine request: its n
  histogram request_params_max_tokens;  ///< per engine request: its max_tokens
  /// Observes the scheduler's times of a finished engine request (those it reached).
  void observe(const actors::request_times& t);
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
