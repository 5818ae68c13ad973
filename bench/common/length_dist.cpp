#include "bench/common/length_dist.hpp"

#include <algorithm>
#include <cmath>

namespace actorserve::bench {
namespace {

constexpr double sharegpt_input_median = 140, sharegpt_input_sigma = 1.4;
constexpr double sharegpt_output_median = 140, sharegpt_output_sigma = 0.8;
constexpr int64_t sharegpt_max_input = 1024, sharegpt_max_total = 2048, sharegpt_min_len = 4;

std::pair<int32_t, int32_t> sharegpt_pair(std::mt19937_64& rng) {
  std::lognormal_distribution<double> in(std::log(sharegpt_input_median), sharegpt_input_sigma);
  std::lognormal_distribution<double> out(std::log(sharegpt_output_median), sharegpt_output_sigma);
  for (;;) {
    const auto i = static_cast<int64_t>(std::llround(in(rng)));
    const auto o = static_cast<int64_t>(std::llround(out(rng)));
    if (i < sharegpt_min_len || o < sharegpt_min_len || i > sharegpt_max_input || i + o > sharegpt_max_total) continue;
    return {static_cast<int32_t>(i), static_cast<int32_t>(o)};
  }
}

int32_t uniform_len(int64_t len, double ratio, std::mt19937_64& rng) {
  const auto lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(double(len) * (1 - ratio))));
  const auto hi = std::max<int64_t>(lo, static_cast<int64_t>(std::ceil(double(len) * (1 + ratio))));
  return static_cast<int32_t>(std::uniform_int_distribution<int64_t>(lo, hi)(rng));
}

}  // namespace

result<length_kind> parse_length_kind(const std::string& name) {
  if (name == "fixed") return length_kind::fixed;
  if (name == "uniform" || name == "random") return length_kind::uniform;
  if (name == "sharegpt") return length_kind::sharegpt;
  return make_error(error_code::invalid_argument,
                    "--length-distribution: '" + name + "' is not fixed, uniform or sharegpt");
}

std::vector<std::pair<int32_t, int32_t>> sample_lengths(const length_spec& spec, int64_t n, std::mt19937_64& rng) {
  std::vector<std::pair<int32_t, int32_t>> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t k = 0; k < n; ++k) {
    switch (spec.kind) {
      case length_kind::fixed:
        out.emplace_back(static_cast<int32_t>(spec.input_len), static_cast<int32_t>(spec.output_len));
        break;
      case length_kind::uniform:
        out.emplace_back(uniform_len(spec.input_len, spec.range_ratio, rng),
                         uniform_len(spec.output_len, spec.range_ratio, rng));
        break;
      case length_kind::sharegpt: out.push_back(sharegpt_pair(rng)); break;
    }
  }
  return out;
}

}  // namespace actorserve::bench
