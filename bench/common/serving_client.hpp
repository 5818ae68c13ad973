#pragma once
/// The serving benchmark's client: many concurrent streamed /v1/completions requests over HTTP/SSE
/// on one thread (Boost.Beast on an Asio io_context, C++20 coroutines), sent at a Poisson rate
/// and/or under a concurrency cap, each timed as vLLM's benchmark_serving times it (TTFT, ITL,
/// latency). Beast lives in serving_client.cpp alone.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"

namespace actorserve::bench {

struct serving_request {
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 128;
};

struct serving_options {
  std::string host = "127.0.0.1";
  int64_t port = 8000;
  std::string model;                     ///< "model" field; empty: the first id of GET /v1/models
  std::string api_key;                   ///< sent as a Bearer token when set
  double request_rate = std::numeric_limits<double>::infinity();  ///< requests/s (inf: all at once)
  double burstiness = 1.0;               ///< gamma shape of the inter-arrival times (1: Poisson)
  int64_t max_concurrency = 0;           ///< 0: no cap
  double temperature = 0.0;
  std::string extra_body;                ///< a JSON object whose members join every request body
  uint64_t seed = 0;                     ///< arrival times
  double idle_timeout_s = 600;           ///< per network operation
  double wait_for_server_s = 0;          ///< poll GET /health this long before starting
  int64_t server_pid = 0;                ///< stop waiting once this process is gone (0: not watched)
  double duration_limit_s = 0;           ///< stop the benchmark here, unfinished requests fail (0: none)
};

/// One request's outcome; times in seconds.
struct request_outcome {
  bool success = false;
  std::string error;
  int64_t prompt_len = 0;
  int64_t output_tokens = 0;             ///< usage.completion_tokens (else the streamed chunks)
  double start_s = 0;                    ///< since the benchmark started
  double ttft_s = 0;
  double latency_s = 0;
  std::vector<double> itl_s;             ///< gaps between streamed chunks after the first
};

struct serving_run {
  std::string model;                     ///< the model name used
  std::vector<request_outcome> outcomes; ///< in request order
  double duration_s = 0;                 ///< first send to last completion
  int64_t peak_concurrency = 0;
  bool hit_duration_limit = false;
};

/// The members of `extra_body` (a JSON object's text, e.g. `{"response_format": {...}}`) as the
/// text to splice into a request body after its own members: "" for "" or "{}", else ",<members>".
/// An error names --extra-body when the text is not one JSON object or repeats a field the
/// benchmark sets itself.
result<std::string> extra_body_members(std::string_view extra_body);

/// Waits for the server (if asked), sends one untimed test request, then runs all requests.
result<serving_run> run_serving(const serving_options& opts, const std::vector<serving_request>& requests);

/// Splits an SSE byte stream into the payloads of its `data:` lines (fed in arbitrary pieces).
class sse_reader {
 public:
  /// Appends bytes; returns the payloads of the events completed by them.
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string buffer_;
};

}  // namespace actorserve::bench
