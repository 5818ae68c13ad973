#pragma once
/// Synthetic request-length distributions for the serving benchmark.
///   fixed:    every request has input_len / output_len
///   uniform:  vLLM's random dataset: each length uniform in [len*(1-r), len*(1+r)]
///   sharegpt: long-tailed, log-normal input (median 140, sigma 1.4) and output (median 140,
///             sigma 0.8) lengths, redrawn where vLLM's ShareGPT filter would prune (a length
///             under 4, input over 1024, input + output over 2048). Means come out near 205 in /
///             190 out with medians near 120 / 140, close to ShareGPT under the Llama tokenizers.
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "config/error.hpp"

namespace actorserve::bench {

enum class length_kind { fixed, uniform, sharegpt };

struct length_spec {
  length_kind kind = length_kind::fixed;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0.0;          ///< uniform only
};

/// "fixed" | "uniform" | "sharegpt" (also "random" for uniform, as vLLM names it).
result<length_kind> parse_length_kind(const std::string& name);

/// `n` (input, output) length pairs.
std::vector<std::pair<int32_t, int32_t>> sample_lengths(const length_spec& spec, int64_t n, std::mt19937_64& rng);

}  // namespace actorserve::bench
